"""infra/config/go_yaml.py against go-yaml v3's own decode tests: the cases of decode_test.go's
`unmarshalTests` that decode into interface{} (what the Pulumi CLI's config reader gets) and the
duplicate-key cases of `unmarshalStrictTests`, transcribed from go-yaml/yaml@00aeb2c63b7c decode_test.go
(the v3 branch; resolve.go read at 0d383ff995a5). Cases decoding into typed Go values (int8, uint,
time.Duration, structs) test Go's conversions, not the YAML reading, and are left out; so is `.NaN`
(upstream skips it too: NaN is not equal to itself)."""

from __future__ import annotations

import datetime as dt
import math

import pytest

from infra.config.go_yaml import GoYamlError, load

UTC = dt.UTC
# decode_test.go unmarshalTests, the map[string]interface{} / map[interface{}]interface{} rows.
DECODES = [
    ("v: hi", {"v": "hi"}),
    ("v: true", {"v": True}),
    ("v: 10", {"v": 10}),
    ("v: 0b10", {"v": 2}),
    ("v: 0xA", {"v": 10}),
    ("v: 0.1", {"v": 0.1}),
    ("v: .1", {"v": 0.1}),
    ("v: .Inf", {"v": math.inf}),
    ("v: -.Inf", {"v": -math.inf}),
    ("v: -10", {"v": -10}),
    ("v: -.1", {"v": -0.1}),
    ("canonical: 6.8523e+5", {"canonical": 6.8523e5}),
    ("expo: 685.230_15e+03", {"expo": 685.23015e03}),
    ("fixed: 685_230.15", {"fixed": 685230.15}),
    ("neginf: -.inf", {"neginf": -math.inf}),
    ("canonical: true", {"canonical": True}),
    ("canonical: false", {"canonical": False}),
    ("bool: True", {"bool": True}),
    ("bool: False", {"bool": False}),
    ("bool: TRUE", {"bool": True}),
    ("bool: FALSE", {"bool": False}),
    ("canonical: 685230", {"canonical": 685230}),
    ("decimal: +685_230", {"decimal": 685230}),
    ("octal: 02472256", {"octal": 685230}),
    ("octal: -02472256", {"octal": -685230}),
    ("octal: 0o2472256", {"octal": 685230}),
    ("octal: -0o2472256", {"octal": -685230}),
    ("hexa: 0x_0A_74_AE", {"hexa": 685230}),
    ("bin: 0b1010_0111_0100_1010_1110", {"bin": 685230}),
    ("bin: -0b101010", {"bin": -42}),
    ("bin: -0b1000000000000000000000000000000000000000000000000000000000000000", {"bin": -(2**63)}),
    ("empty:", {"empty": None}),
    ("canonical: ~", {"canonical": None}),
    ("english: null", {"english": None}),
    ("~: null key", {None: "null key"}),
    ("seq: [A,B]", {"seq": ["A", "B"]}),
    ("seq: [A,1,C]", {"seq": ["A", 1, "C"]}),
    ("seq:\n - A\n - B", {"seq": ["A", "B"]}),
    ("seq:\n - A\n - 1\n - C", {"seq": ["A", 1, "C"]}),
    ("a: {b: c}", {"a": {"b": "c"}}),
    ("a: {b: c, 1: d}", {"a": {"b": "c", 1: "d"}}),
    ("'1': '\"2\"'", {"1": '"2"'}),
    ("v: !!float '1.1'", {"v": 1.1}),
    ("v: !!float 0", {"v": 0.0}),
    ("v: !!float -1", {"v": -1.0}),
    ("v: !!null ''", {"v": None}),
    ("v: ! test", {"v": "test"}),
    ("foo: null", {"foo": None}),
    ("foo: ~", {"foo": None}),
    ("a: -b_c", {"a": "-b_c"}),
    ("a: +b_c", {"a": "+b_c"}),
    ("a: 50cent_of_dollar", {"a": "50cent_of_dollar"}),
    ("a: {b: https://github.com/go-yaml/yaml}", {"a": {"b": "https://github.com/go-yaml/yaml"}}),
    ("a: [https://github.com/go-yaml/yaml]", {"a": ["https://github.com/go-yaml/yaml"]}),
    ("a: !!str 2015-01-01", {"a": "2015-01-01"}),
    ('a: "2015-01-01"', {"a": "2015-01-01"}),
    ('a: !!timestamp "2015-01-01"', {"a": dt.datetime(2015, 1, 1, tzinfo=UTC)}),
    ("a: 2015-01-01", {"a": dt.datetime(2015, 1, 1, tzinfo=UTC)}),
    # and into time.Time: the same instant when decoded into interface{}
    ("a: 2015-02-24T18:19:39.12Z\n", {"a": dt.datetime(2015, 2, 24, 18, 19, 39, 120000, tzinfo=UTC)}),
    ("a: 2015-2-3T3:4:5Z", {"a": dt.datetime(2015, 2, 3, 3, 4, 5, tzinfo=UTC)}),
    ("a: 2015-02-24t18:19:39Z\n", {"a": dt.datetime(2015, 2, 24, 18, 19, 39, tzinfo=UTC)}),
    ("a: 2015-02-24 18:19:39\n", {"a": dt.datetime(2015, 2, 24, 18, 19, 39, tzinfo=UTC)}),
    # "Base 60 floats are obsolete and unsupported" (into a string there; the resolver keeps text)
    ("a: 1:1\n", {"a": "1:1"}),
    ("a: <foo>", {"a": "<foo>"}),
]  # fmt: skip


@pytest.mark.parametrize(("data", "value"), DECODES, ids=[d for d, _ in DECODES])
def test_decodes_as_go_yaml_v3_into_interface(data, value):
    assert load(data) == value


def test_nan_is_a_float():  # upstream's case is commented out: NaN != NaN
    assert math.isnan(load("notanum: .NaN")["notanum"])


# The YAML 1.1 booleans are text into interface{} ("For backwards compatibility with 1.1, decoding old
# strings into typed values still works": into a Go bool only, which a config map is not).
@pytest.mark.parametrize("word", ["on", "y", "Off", "No", "yes", "YES"])
def test_yaml_1_1_booleans_are_text(word):
    assert load(f"option: {word}") == {"option": word}


# decode_test.go unmarshalStrictTests, the `unique: true` rows (v3 refuses duplicate keys by default).
DUPLICATES = [
    ("a: 1\nb: 2\na: 3\n", 'line 3: mapping key "a" already defined at line 1'),
    ("c: 3\na: 1\nb: 2\nc: 4\n", 'line 4: mapping key "c" already defined at line 1'),
    ("c: 0\na: 1\nb: 2\nc: 1\n", 'line 4: mapping key "c" already defined at line 1'),
    ("c: 1\na: 1\nb: 2\nc: 3\n", 'line 4: mapping key "c" already defined at line 1'),
    ("a: 1\n9: 2\nnull: 3\n9: 4", 'line 4: mapping key "9" already defined at line 2'),
]


@pytest.mark.parametrize(("data", "message"), DUPLICATES, ids=[m for _, m in DUPLICATES])
def test_a_duplicate_key_is_refused_as_go_yaml_v3_refuses_it(data, message):
    with pytest.raises(GoYamlError, match=message):
        load(data)


def test_a_duplicate_key_deep_in_a_stack_file_names_its_lines():
    text = (
        "config:\n  mlops-eks:addons:\n    gpu:\n      amdDevicePlugin: true\n      amdDevicePlugin: false\n"
    )
    with pytest.raises(GoYamlError, match='line 5: mapping key "amdDevicePlugin" already defined at line 4'):
        load(text)
