"""The Dockerfile, checked without Docker (no daemon here, and building would pull GBs): its steps
set the machine up with the README's set-up command, run the app on all interfaces with the
classroom lockdown on, copy only files that exist and reach the build context, and install the
pinned CPU torch. scripts/docker_steps.py does the parsing; its checks and its step runner are
tested on broken and tiny Dockerfiles too."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("docker_steps", REPO / "scripts" / "docker_steps.py")
docker_steps = importlib.util.module_from_spec(_spec)
sys.modules["docker_steps"] = docker_steps
_spec.loader.exec_module(docker_steps)


@pytest.fixture(scope="module")
def plan():
    return docker_steps.check(REPO / "Dockerfile", REPO)


def by_keyword(plan, keyword):
    return [ins for ins in plan.instructions if ins.keyword == keyword]


def test_the_dockerfile_checks_clean(plan):
    assert plan.problems == []
    assert plan.instructions[0].keyword == "FROM"


def test_set_up_is_the_readme_commands_set_up(plan):
    runs = [ins.args for ins in by_keyword(plan, "RUN")]
    assert any("bash scripts/setup_env.sh" in r for r in runs), runs
    # The README's commands are scripts/app.sh and scripts/test.sh; both set up through setup_env.sh.
    readme = (REPO / "README.md").read_text()
    assert "bash scripts/app.sh" in readme and "bash scripts/test.sh" in readme
    for script in ("app.sh", "test.sh"):
        assert "bash scripts/setup_env.sh" in (REPO / "scripts" / script).read_text()


def test_runs_the_app_on_all_interfaces_in_classroom_mode(plan, tmp_path):
    (cmd,) = by_keyword(plan, "CMD")
    assert cmd.exec_form == ["bash", "scripts/app.sh", "--server.address", "0.0.0.0"]
    (expose,) = by_keyword(plan, "EXPOSE")
    assert expose.args.split() == [plan.values["STREAMLIT_SERVER_PORT"]] == ["8501"]
    assert plan.values["SPECVIZ_CLASSROOM"] == "1"
    from specviz.server import ServerSettings

    no_file = tmp_path / "none.toml"
    assert ServerSettings.load(env={"SPECVIZ_CLASSROOM": plan.values["SPECVIZ_CLASSROOM"]}, path=no_file).classroom
    assert not ServerSettings.load(env={}, path=no_file).classroom  # off unless the image turns it on
    assert not ServerSettings.load(env={"SPECVIZ_CLASSROOM": "0"}, path=no_file).classroom  # README: -e ...=0


def test_installs_the_pinned_cpu_torch_that_setup_then_keeps(plan):
    from packaging.specifiers import SpecifierSet

    pin = next(line.split("==")[1].strip() for line in (REPO / "requirements.txt").read_text().splitlines()
               if line.startswith("torch=="))
    torch_step = next(line for line in plan.lines if "--extra-index-url" in line)
    assert f'"torch=={pin}"' in torch_step  # the pin is read from requirements.txt at build time
    assert "whl/cpu" in plan.values["TORCH_INDEX_URL"]
    # setup_env.sh's `pip install -r requirements.txt` then finds torch==pin satisfied by the CPU build:
    assert SpecifierSet(f"=={pin}").contains(f"{pin}+cpu")
    steps = [ins for ins in plan.instructions if ins.keyword == "RUN" and not ins.args.startswith("useradd")]
    assert "--extra-index-url" in steps[0].args and "setup_env.sh" in steps[1].args  # torch first


def test_python_version_matches_the_readme(plan):
    image = by_keyword(plan, "FROM")[0].args
    assert image.startswith("python:3.11")
    assert "Python 3.11" in (REPO / "README.md").read_text()


def test_build_context_has_what_the_app_needs_and_not_the_venv():
    patterns = docker_steps.dockerignore(REPO)
    for heavy in (".venv/bin/python", ".git/HEAD", "work-data/x", "specviz/__pycache__/engine.cpython-311.pyc"):
        assert docker_steps.ignored(heavy, patterns), heavy
    files = set(docker_steps.context_files(REPO, patterns))
    for needed in ("app.py", "requirements.txt", "scripts/app.sh", "scripts/setup_env.sh", ".streamlit/config.toml",
                   "specviz/engine.py", "assets/draft/config.json", "docker/wheels/README.md"):
        assert needed in files, needed
    assert not any(f.startswith((".venv/", "work-data/")) for f in files)


def test_check_finds_broken_dockerfiles(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "bad.sh").write_text("if then fi\n")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key").write_text("x")
    (tmp_path / ".dockerignore").write_text("secret\n")
    (tmp_path / "Dockerfile").write_text(
        "FROM python:3.11-slim\nCOPY missing.txt ./\nCOPY secret/key ./\nRUN bash scripts/none.sh\n"
        "RUN bash scripts/bad.sh\nRUN echo $(sed -n 's/^torch==//p' requirements.txt)\n"
    )
    plan = docker_steps.check(tmp_path / "Dockerfile", tmp_path)
    text = "\n".join(plan.problems)
    assert "missing.txt does not exist" in text
    assert "secret/key is excluded by .dockerignore" in text
    assert "scripts/none.sh does not exist" in text
    assert "scripts/bad.sh does not parse" in text
    assert "gives nothing" in text  # no requirements.txt in this context
    assert docker_steps.main(["--dockerfile", str(tmp_path / "Dockerfile")]) == 1


def test_run_executes_copy_env_and_run_steps_in_a_throwaway_folder(tmp_path):
    ctx = tmp_path / "ctx"
    (ctx / "sub").mkdir(parents=True)
    (ctx / "requirements.txt").write_text("torch==9.9.9\n")
    (ctx / "sub" / "a.txt").write_text("hello\n")
    (ctx / "Dockerfile").write_text(
        "FROM python:3.11-slim\n"
        "ARG GREETING=hi\n"
        "ENV OUTDIR=/app/out \\\n    EXTRA=1\n"
        "RUN useradd someone\n"
        "WORKDIR /app\n"
        "COPY requirements.txt ./\n"
        "COPY sub/ /opt/sub/\n"
        'RUN mkdir -p "$OUTDIR" && echo "$GREETING $(sed -n \'s/^torch==//p\' requirements.txt)" > /app/out/v.txt\n'
        "RUN printenv OUTDIR > out/env.txt && cp /opt/sub/a.txt out/\n"
        "RUN python -c 'import sys; print(sys.version_info[0])' > out/py.txt\n"
        'CMD ["bash", "-c", "true"]\n'
    )
    work = tmp_path / "app"
    lines: list[str] = []
    assert docker_steps.run_steps(ctx / "Dockerfile", ctx, work, log=lines.append) == 0, lines
    assert (work / "out" / "v.txt").read_text().strip() == "hi 9.9.9"
    assert (work / "out" / "a.txt").read_text() == "hello\n"
    assert (work / "out" / "py.txt").read_text().strip() == "3"
    assert (work / "out" / "env.txt").read_text().strip() == str((work / "out").resolve())  # ENV paths mapped too
    assert any("skipped, a system step" in line and "useradd" in line for line in lines)
    # A failing step stops the run with status 1.
    (ctx / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\nRUN false\nRUN touch never\n")
    assert docker_steps.run_steps(ctx / "Dockerfile", ctx, tmp_path / "app2", log=lines.append) == 1
    assert not (tmp_path / "app2" / "never").exists()


def test_docker_steps_sh_checks_the_real_dockerfile():
    done = subprocess.run(["bash", "scripts/docker_steps.sh"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].endswith("0 problems")
