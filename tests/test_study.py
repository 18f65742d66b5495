"""metrobench.study: the typed study config, its loading errors, and the defaults file and schema made from it."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml

from metrobench.cli import main
from metrobench.errors import MetrobenchError
from metrobench.study import DEFAULTS_PATH, SCHEMA_PATH, Section, StudyConfig, defaults_text, json_schema, \
    load_study, schema_text

REPO = Path(__file__).resolve().parents[1]
CONFIGS = ["config/config.yaml", "config/demo.yaml", "config/mini-study.yaml"]


def _write(path: Path, value: dict) -> str:
    path.write_text(yaml.safe_dump(value))
    return str(path)


def with_defaults(config: dict) -> dict:
    """``config`` validated against the JSON schema with its defaults filled in (as an editor's checker would)."""
    base = jsonschema.Draft202012Validator
    check_properties = base.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        for name, sub in properties.items():
            if "default" in sub and isinstance(instance, dict):
                instance.setdefault(name, sub["default"])
        yield from check_properties(validator, properties, instance, schema)

    validator = jsonschema.validators.extend(base, {"properties": set_defaults})(json_schema())
    validator.validate(config)
    return config


@pytest.mark.parametrize("path", CONFIGS)
def test_the_study_configs_load_and_pass_the_schema(path):
    study = load_study([REPO / path])
    raw = yaml.safe_load((REPO / path).read_text())
    assert set(study.models) == set(raw["models"])
    filled = with_defaults(raw)
    # the JSON schema agrees with the model: the config with its defaults filled in is the same study
    assert StudyConfig.model_validate(filled) == study


@pytest.mark.parametrize("path", CONFIGS)
def test_the_study_configs_state_only_what_differs_from_the_defaults(path):
    study, defaults = load_study([REPO / path]), StudyConfig()
    raw = yaml.safe_load((REPO / path).read_text())
    restated = []
    for key in (k for k in raw if not k.startswith("x-")):
        ours, default = getattr(study, key), getattr(defaults, key)
        if isinstance(default, Section):
            restated += [f"{key}.{sub}" for sub in raw[key] if getattr(ours, sub) == getattr(default, sub)]
        elif ours == default:
            restated.append(key)
    assert restated == [], f"{path} restates defaults (config/defaults.yaml): {restated}"


def test_the_committed_defaults_are_the_generated_ones():
    assert (REPO / DEFAULTS_PATH).read_text() == defaults_text(), \
        "regenerate: python -m metrobench.study --defaults > config/defaults.yaml"
    # the file is a config whose every value is the default, every field named in model order
    assert load_study([REPO / DEFAULTS_PATH]) == StudyConfig()
    raw = yaml.safe_load(defaults_text())
    assert list(raw) == list(StudyConfig.model_fields)
    assert list(raw["students"] or {}) == [] and "max_length:" in defaults_text()    # entries' keys as comments


def test_defaults_that_depend_on_other_keys_are_the_models():
    assert StudyConfig().stats.errata_models == ["rule-agent"]
    assert StudyConfig().view_models() == ["rule-agent"]
    demo = load_study([REPO / "config/demo.yaml"])
    # no view.models: the leaderboard's, student groups expanded to their seeds
    assert demo.view_models() == ["smollm2-135m", "smollm2-peft-s42", "smollm2-peft-s43", "rule-agent"]
    chosen = demo.model_copy(update={"view": demo.view.model_copy(update={"models": ["smollm2-peft"]})})
    assert chosen.view_models() == ["smollm2-peft-s42", "smollm2-peft-s43"]


def test_a_student_caps_the_recipe_s_steps_and_length(tmp_path):
    base = str(REPO / "config/demo.yaml")
    capped = _write(tmp_path / "capped.yaml", {"students": {"smollm2": {"max_steps": 1, "max_length": 256}}})
    student = load_study([base, capped]).students["smollm2"]
    assert (student.max_steps, student.max_length) == (1, 256)
    assert load_study([base]).students["smollm2"].max_length is None         # the recipe's
    zero = _write(tmp_path / "zero.yaml", {"students": {"smollm2": {"max_length": 0}}})
    with pytest.raises(MetrobenchError, match=r"zero\.yaml: field students\.smollm2\.max_length: Input should be "
                                              r"greater than or equal to 1"):
        load_study([base, zero])


def test_the_committed_schema_is_the_generated_one():
    assert (REPO / SCHEMA_PATH).read_text() == schema_text(), \
        "regenerate: python -m metrobench.study --schema > workflow/schemas/config.schema.yaml"
    assert yaml.safe_load(schema_text()) == json_schema()


def test_a_misspelt_key_is_one_error_naming_the_file_and_the_field(tmp_path):
    base = str(REPO / "config/demo.yaml")
    bad = _write(tmp_path / "bad.yaml", {"scoring": {"judge_modle": "x"}})
    with pytest.raises(MetrobenchError) as err:
        load_study([base, bad])
    assert str(err.value) == f"{bad}: field scoring.judge_modle: Extra inputs are not permitted"
    top = _write(tmp_path / "top.yaml", {"leaderbord": []})
    with pytest.raises(MetrobenchError, match=r"top\.yaml: field leaderbord: Extra inputs are not permitted"):
        load_study([base, top])
    # the JSON schema (documentation for editors) names the same keys: it rejects it too
    with pytest.raises(jsonschema.ValidationError, match="leaderbord"):
        with_defaults({**yaml.safe_load(Path(base).read_text()), "leaderbord": []})
    # YAML anchors under x- keys are not config keys
    assert load_study([base, _write(tmp_path / "anchors.yaml", {"x-anything": {"a": 1}})]).leaderboard


def test_bad_values_name_the_file_that_set_them(tmp_path):
    base = str(REPO / "config/demo.yaml")
    cases = [
        ({"students": {"smollm2": {"seeds": [42, 42]}}}, "field students.smollm2.seeds: Value error, "
                                                         "listed more than once: 42"),
        ({"systems": ["marta", "oslo"]}, "field systems[1]: Input should be"),
        ({"stats": {"comparisons": [["a"]]}}, "field stats.comparisons[0]"),
        ({"models": {"smollm2-135m": {"provider": "llama_cpp", "max_tokenz": 5}}},
         "field models.smollm2-135m.max_tokenz: Extra inputs are not permitted"),
        ({"student_serving": {"temperature": "hot"}}, "field student_serving.temperature: Input should be"),
        ({"downloads": {"gguf": {"models/x.gguf": {"repo": "acme/x"}}}},
         "field downloads.gguf.models/x.gguf.file: Field required"),
        ({"downloads": {"bases": {"acme/x": {"revision": ""}}}},
         "field downloads.bases.acme/x.revision: String should have at least 1 character"),
    ]
    for index, (override, message) in enumerate(cases):
        path = _write(tmp_path / f"o{index}.yaml", override)
        with pytest.raises(MetrobenchError) as err:
            load_study([base, path])
        assert str(err.value).startswith(f"{path}: ") and message in str(err.value), str(err.value)
        assert "\n" not in str(err.value)


def test_files_merge_in_order_and_overrides_come_last(tmp_path):
    extra = _write(tmp_path / "extra.yaml", {"stats": {"seed": 7}, "bench": {"sample": 3}})
    study = load_study([REPO / "config/demo.yaml", extra], overrides={"bench": {"sample": 2}})
    assert (study.stats.seed, study.stats.n_resamples) == (7, 2000)   # nested mappings merged
    assert (study.bench.sample, study.bench.partition) == (2, "holdout")
    with pytest.raises(MetrobenchError, match="nowhere.yaml: no such config file"):
        load_study([str(tmp_path / "nowhere.yaml")])
    assert StudyConfig().seeds() == {} and load_study([REPO / "config/config.yaml"]).seeds()["2b"] == [42, 43, 44]


def test_tables_command_reports_a_bad_config_in_one_line(tmp_path, capsys):
    bad = _write(tmp_path / "bad.yaml", {"stats": {"n_resamples": 10}})
    assert main(["tables", "--scores", str(tmp_path), "--config", bad, "--out", str(tmp_path)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"metrobench: error: {bad}: field stats.n_resamples: Input should be greater than or equal "
                   "to 100"]


def test_checking_a_bad_config_from_the_command_line_is_one_line_and_status_2(tmp_path):
    # issue 44: README promises status 2 for a user error; `python -m metrobench.study` gave 1
    import subprocess
    import sys

    bad = tmp_path / "bad.yaml"
    bad.write_text("bench: {partition: everything}\n")
    proc = subprocess.run([sys.executable, "-m", "metrobench.study", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("metrobench: error: ") and "bad.yaml" in proc.stderr
    good = subprocess.run([sys.executable, "-m", "metrobench.study"], capture_output=True, text=True)
    assert (good.returncode, good.stdout) == (0, "ok: the defaults\n")


def test_report_targets_default_to_table2_and_the_viewer():
    # issue 44: a config that names no report targets still gets a Results section
    assert StudyConfig().report_targets() == ["view"]                    # no leaderboard: no Table 2 to build
    ranked = StudyConfig(leaderboard=[{"model": "rule-agent", "reference": True}])
    assert ranked.report_targets() == ["table2.csv", "view"]
    chosen = StudyConfig(leaderboard=[{"model": "rule-agent"}], report={"targets": ["table9.csv"]})
    assert chosen.report_targets() == ["table9.csv"]
    assert StudyConfig(report={"targets": []}).report_targets() == []   # an explicit empty list: nothing
