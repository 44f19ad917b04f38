"""A real model's warm start (engine.train.adapter_warm_start) through `rlab run`: the run's LoRA
adapter learns the task's demonstrations first, is cached by content, is recorded in the
manifest, and `rlab compare` names warm start on/off as the treatment. A small random model
with the tiny tool template stands in for SmolLM2 (tests/test_smollm2.py runs the real one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import LlamaForCausalLM

from rlab.engine.cli.main import main
from rlab.engine.policy.model import Policy
from rlab.engine.policy.tiny import build_config, build_tokenizer, save_policy
from rlab.store.reader import StoreReader

SHOP = Path(__file__).resolve().parents[1] / "examples" / "tasks" / "shop_agent"
SMALL_RUN = ("--max-steps", "1", "--prompts-per-step", "2", "--group-size", "2", "--eval-size", "2",
             "--max-new-tokens", "8", "--lora-rank", "4", "--eval-every", "1")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    tokenizer = build_tokenizer(tools=True)
    out = tmp_path_factory.mktemp("model") / "model"
    save_policy(Policy(LlamaForCausalLM(build_config(len(tokenizer), 512)), tokenizer, "cpu"), out)
    return out


def _run(capsys, db: Path, name: str, *args) -> tuple[int, str]:
    code = main(["run", "--headless", "--task", str(SHOP), "--db", str(db), "--name", name, *map(str, args)])
    return code, capsys.readouterr().err


def _manifest(db: Path, name: str) -> dict:
    with StoreReader(db) as reader:
        return reader.run_by_name(name)["manifest"]


def test_a_real_model_s_adapter_is_warm_started_cached_and_compared(tmp_path, model_dir, capsys, monkeypatch):
    monkeypatch.setenv("RLAB_CACHE_DIR", str(tmp_path / "cache"))
    db = tmp_path / "runs.db"
    code, err = _run(capsys, db, "warm", "--model", model_dir, "--warm-start-steps", 4, *SMALL_RUN)
    assert code == 0, err
    assert "warm start of the LoRA adapter, once: 4 supervised steps on 175 demonstrations" in err
    warm = _manifest(db, "warm")["warm_start"]
    assert warm["on"] and warm["steps"] == 4 and warm["demonstrations"] == 175 and not warm["cached"]
    assert 0 < warm["loss"] < 10 and 0 <= warm["probe_tool_use"] <= 1
    adapter = Path(warm["path"])
    assert (adapter / "adapter_model.safetensors").is_file() and (adapter / "warm_start.json").is_file()

    code, err = _run(capsys, db, "again", "--model", model_dir, "--warm-start-steps", 4, *SMALL_RUN)
    assert code == 0, err
    again = _manifest(db, "again")["warm_start"]
    assert "the warm-started adapter is cached" in err and again["cached"] and again["adapter"] == warm["adapter"]

    code, err = _run(capsys, db, "longer", "--model", model_dir, "--warm-start-steps", 5, *SMALL_RUN)
    assert code == 0, err
    assert _manifest(db, "longer")["warm_start"]["adapter"] != warm["adapter"]  # other settings, another adapter

    code, err = _run(capsys, db, "cold", "--model", model_dir, "--no-warm-start", *SMALL_RUN)
    assert code == 0, err
    assert _manifest(db, "cold")["warm_start"] == {"on": False} and "warm start" not in err

    assert main(["compare", "cold", "warm", "--db", str(db), "--json", "--force"]) == 0
    treatments = {d["field"]: (d["a"], d["b"]) for d in json.loads(capsys.readouterr().out)["treatments"]}
    assert treatments == {"warm_start.on": (False, True), "warm_start.steps": (None, 4)}


def test_a_cached_adapter_loads_into_a_fresh_lora_as_it_was_trained(tmp_path, model_dir, monkeypatch):
    import contextlib

    import torch
    from peft import get_peft_model_state_dict

    from rlab.engine.policy.lora import LoraSettings, apply_lora
    from rlab.engine.run.config import RunConfig
    from rlab.engine.train.adapter_warm_start import warm_start_adapter
    from rlab.engine.train.warm_start import tool_schemas
    from rlab.scenarios import load_scenario

    monkeypatch.setenv("RLAB_CACHE_DIR", str(tmp_path / "cache"))
    scenario = load_scenario(None, SHOP)
    config = RunConfig(lora_rank=4, warm_start_steps=3)

    def adapted() -> Policy:
        policy = Policy.load(model_dir, "cpu")
        policy.model = apply_lora(policy.model, LoraSettings(rank=4))
        return policy

    first, second = adapted(), adapted()
    trained = warm_start_adapter(first, scenario, config, model_dir, tool_schemas(scenario), contextlib.nullcontext)
    loaded = warm_start_adapter(second, scenario, config, model_dir, tool_schemas(scenario), contextlib.nullcontext)
    assert not trained.cached and loaded.cached and loaded.adapter == trained.adapter and loaded.loss == trained.loss
    a, b = get_peft_model_state_dict(first.model), get_peft_model_state_dict(second.model)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # LoRA's B matrices start at zero: these were trained
    assert all(t.abs().sum() > 0 for k, t in a.items() if "lora_B" in k)


@pytest.mark.parametrize(("args", "message"), [
    (("--warm-start-steps", 5), "--warm-start-steps sets a real model's warm start (--model)"),
    (("--model", "MODEL", "--lora-rank", 0), "a real model's warm start trains its LoRA adapter: pass --lora-rank"),
])
def test_a_warm_start_that_cannot_run_is_one_error_line(tmp_path, model_dir, capsys, args, message):
    db = tmp_path / "runs.db"
    args = tuple(model_dir if a == "MODEL" else a for a in args)
    code = main(["run", "--headless", "--task", str(SHOP), "--db", str(db), "--max-steps", "1", *map(str, args)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not db.exists()  # a failed start leaves the run file as it was
