"""Storage one level down (a run's own directory under checkpoint.dir), local and on S3 through moto."""

from trainer.storage import LocalStorage, S3Storage


def test_an_s3_child_writes_under_its_prefix_with_the_same_client_and_retries(s3):
    child = S3Storage("s3://mlops/ckpt", client=s3, retries=3, backoff_s=0.5).child("run-1")
    child.put_bytes("latest", b"step-000000010")
    assert (child.uri, child.client, child.retries, child.backoff_s) == ("s3://mlops/ckpt/run-1", s3, 3, 0.5)
    assert s3.get_object(Bucket="mlops", Key="ckpt/run-1/latest")["Body"].read() == b"step-000000010"
    assert S3Storage("s3://mlops", client=s3).child("run-2")._key("latest") == "run-2/latest"


def test_a_local_child_is_a_subdirectory(tmp_path):
    child = LocalStorage(tmp_path).child("run-1")
    child.put_bytes("latest", b"x")
    assert (tmp_path / "run-1" / "latest").read_bytes() == b"x"
