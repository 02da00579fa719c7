"""The cluster add-ons, one module or folder each, installed in order by `install.install_addons`."""
