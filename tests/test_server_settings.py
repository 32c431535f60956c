"""Server settings (specviz.server): classroom lockdown off by default, env over file over defaults,
bad values refused, limits and checks, and the thread plan for concurrent sessions."""

from __future__ import annotations

import threading

import pytest
import torch

from specviz.errors import ConfigError, PromptError
from specviz.server import PERSONAL, ServerSettings, plan_threads

NO_FILE = "/nonexistent/specviz.toml"


def load(env=None, path=NO_FILE):
    return ServerSettings.load(env=env or {}, path=path)


def test_defaults_are_a_personal_machine():
    s = load()
    assert s.classroom is False and s.source == "defaults"
    assert s.limits == PERSONAL
    assert s.allowed_pairs(["default", "tiny", "custom"]) == ["default", "tiny", "custom"]
    s.check_pair("custom")
    s.check_prompt_text("x" * 100_000)  # no cap on a personal machine
    s.check_prompt_ids(list(range(50_000)))
    s.check_config(k=16, max_new_tokens=4096)


def test_classroom_from_the_environment_locks_pairs_and_caps_inputs():
    s = load({"SPECVIZ_CLASSROOM": "1", "SPECVIZ_MAX_K": "6", "SPECVIZ_MAX_PROMPT_CHARS": "50"})
    assert s.classroom and s.limits.k == 6 and s.limits.prompt_chars == 50
    assert "SPECVIZ_CLASSROOM" in s.source and "SPECVIZ_MAX_K" in s.source
    assert s.allowed_pairs(["default", "tiny", "custom"]) == ["default", "tiny"]
    with pytest.raises(ConfigError, match="disabled on this classroom server"):
        s.check_pair("custom")
    with pytest.raises(PromptError, match="51 characters.*at most 50"):
        s.check_prompt_text("y" * 51)
    s.check_prompt_text("y" * 50)
    with pytest.raises(PromptError, match="257 tokens.*at most 256"):
        s.check_prompt_ids([1] * 257)
    with pytest.raises(ConfigError, match="K = 7 is above this server's limit of 6"):
        s.check_config(k=7, max_new_tokens=10)
    with pytest.raises(ConfigError, match="above this server's limit of 256"):
        s.check_config(k=2, max_new_tokens=257)
    with pytest.raises(ConfigError, match="limit of 200 samples"):
        s.check_lab_n(201)
    assert s.clamp({"k": 9, "max_new_tokens": 100, "lab_n": 5000}) == {"k": 6, "lab_n": 200}
    note = s.sidebar_markdown()
    assert "Classroom server" in note and "K ≤ 6" in note and "50 characters" in note


def test_settings_file_then_environment_overrides(tmp_path):
    f = tmp_path / "specviz.toml"
    f.write_text("[specviz]\nclassroom = true\nmax_k = 4\nmax_decoding = 3\nidle_seconds = 60\n")
    s = load(path=f)
    assert s.classroom and s.max_k == 4 and s.max_decoding == 3 and s.idle_seconds == 60.0
    assert s.source == str(f)
    s2 = load({"SPECVIZ_MAX_K": "5", "SPECVIZ_CLASSROOM": "off"}, path=f)
    assert s2.max_k == 5 and s2.classroom is False and s2.max_decoding == 3
    assert str(f) in s2.source and "SPECVIZ_MAX_K" in s2.source
    # SPECVIZ_SETTINGS names the file when no path is given
    s3 = ServerSettings.load(env={"SPECVIZ_SETTINGS": str(f)})
    assert s3.classroom and s3.max_k == 4


@pytest.mark.parametrize(
    "env, match",
    [
        ({"SPECVIZ_CLASSROOM": "maybe"}, "classroom must be on or off"),
        ({"SPECVIZ_MAX_K": "0"}, "max_k must be a positive integer"),
        ({"SPECVIZ_MAX_NEW_TOKENS": "lots"}, "max_new_tokens must be a positive integer"),
        ({"SPECVIZ_IDLE_SECONDS": "nan"}, "idle_seconds must be a number of seconds"),
        ({"SPECVIZ_BUSY_TIMEOUT": "-1"}, "busy_timeout must be a number of seconds"),
    ],
)
def test_bad_values_are_refused_not_ignored(env, match):
    with pytest.raises(ConfigError, match=match):
        load(env)


def test_bad_settings_files_are_refused(tmp_path):
    f = tmp_path / "specviz.toml"
    f.write_text("[specviz]\nclasroom = true\n")  # a typo must not leave the server open
    with pytest.raises(ConfigError, match="unknown .* setting.*clasroom"):
        load(path=f)
    f.write_text("[specviz\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load(path=f)
    f.write_text("[specviz]\nmax_k = true\n")
    with pytest.raises(ConfigError, match="max_k must be a positive integer"):
        load(path=f)


@pytest.mark.parametrize("cores, slots, want", [(2, 2, 1), (1, 1, 1), (2, 1, 1), (16, 4, 4), (16, 32, 1), (8, 1, 8)])
def test_thread_plan_divides_the_cores_among_decoding_slots(cores, slots, want):
    assert plan_threads(cores, slots) == want
    assert want * min(slots, cores) <= max(cores, 2)  # never oversubscribed (beyond 1 thread each)


def test_thread_override_and_torch_threads_are_process_wide():
    assert load({"SPECVIZ_THREADS": "3"}).threads_per_step(cores=64) == 3
    assert load({"SPECVIZ_MAX_DECODING": "4"}).threads_per_step(cores=16) == 4
    before = torch.get_num_threads()
    seen = []
    try:
        torch.set_num_threads(1 if before != 1 else 2)
        wanted = torch.get_num_threads()
        t = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
        t.start()
        t.join()
    finally:
        torch.set_num_threads(before)
    assert seen == [wanted]  # a new (script) thread inherits the process-wide count


def test_the_example_settings_file_parses_to_the_defaults():
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / ".streamlit" / "specviz.example.toml"
    s = load(path=example)
    defaults = ServerSettings()
    assert s.source == str(example)
    for name in (
        "classroom",
        "max_prompt_chars",
        "max_prompt_tokens",
        "max_new_tokens",
        "max_k",
        "max_lab_n",
        "busy_timeout",
        "idle_seconds",
    ):
        assert getattr(s, name) == getattr(defaults, name), name
