"""The Dockerfile's steps without Docker: check them (default) or run them in a throwaway folder.

    python scripts/docker_steps.py [--dockerfile Dockerfile]            # check, print the plan
    python scripts/docker_steps.py --run DIR [--dockerfile Dockerfile]  # execute the RUN steps in DIR

Checking reads the Dockerfile (comments, line continuations, ARG/ENV substitution, exec-form
CMD) and verifies, without a Docker daemon or a network: every COPY source exists and is not
excluded by .dockerignore; every `bash scripts/X.sh` a RUN step or the CMD calls exists and parses
(`bash -n`); every `$(...)` in a RUN step that only reads files (sed, cat, grep) gives a non-empty
answer (e.g. the torch version read from requirements.txt); and the CMD's program exists.

Running lays DIR out as the image's WORKDIR (the build context's files, minus what .dockerignore
excludes, copied as each COPY says, with absolute image paths mapped under DIR), then runs each RUN
step there with `bash -ec` and the ENV/ARG values; steps that only change the system (useradd,
chown of the image's own users, apt as root) are skipped and said to be. It installs whatever the
steps install (for this repository's Dockerfile: a venv with torch and the pinned requirements,
minutes of CPU and a few GB of disk), so it is for a machine with time to spare; the tests run it
on a small Dockerfile of their own.

Exit status: 0 all good, 1 a check or step failed.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SYSTEM_STEPS = ("useradd", "groupadd", "chown", "apt-get", "apk ", "adduser")
READ_ONLY_COMMANDS = ("sed", "cat", "grep", "head", "tail", "cut")


@dataclass
class Instruction:
    line: int
    keyword: str
    args: str
    flags: dict[str, str] = field(default_factory=dict)

    @property
    def exec_form(self) -> list[str] | None:
        """The JSON-array form of CMD/ENTRYPOINT/RUN, or None for the shell form."""
        import json

        text = self.args.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError:
                return None
            return [str(v) for v in value] if isinstance(value, list) else None
        return None


def parse(text: str) -> list[Instruction]:
    """Dockerfile text -> instructions (comments and blank lines dropped, continuations joined)."""
    out: list[Instruction] = []
    buf, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):  # a comment inside a continued instruction
            continue
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf += stripped[:-1].rstrip() + " "
            continue
        buf += stripped
        keyword, _, args = buf.partition(" ")
        flags = {}
        args = args.strip()
        while args.startswith("--"):
            flag, _, args = args.partition(" ")
            name, _, value = flag[2:].partition("=")
            flags[name] = value
            args = args.strip()
        out.append(Instruction(start, keyword.upper(), args, flags))
        buf = ""
    return out


def substitute(text: str, values: dict[str, str]) -> str:
    """${NAME} and $NAME from ARG/ENV values (unknown names are left as they are)."""
    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return values.get(name, m.group(0))

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, text)


def assignments(args: str) -> dict[str, str]:
    """ENV/ARG arguments: NAME=value pairs (quoted values allowed), or the legacy `ENV NAME value`."""
    parts = shlex.split(args)
    if len(parts) >= 2 and "=" not in parts[0]:
        return {parts[0]: " ".join(parts[1:])}
    return {k: v for k, _, v in (p.partition("=") for p in parts)}


def dockerignore(context: Path) -> list[str]:
    path = context / ".dockerignore"
    if not path.exists():
        return []
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def ignored(relpath: str, patterns: list[str]) -> bool:
    """Whether .dockerignore excludes relpath (a path, or any folder above it, matches a pattern)."""
    parts = Path(relpath).parts
    hit = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.rstrip("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if fnmatch.fnmatch(prefix, pat) or (pat.startswith("**/") and fnmatch.fnmatch(prefix, pat[3:])) or (
                pat.startswith("**/") and fnmatch.fnmatch(parts[i - 1], pat[3:])
            ):
                hit = not negate
                break
    return hit


def context_files(context: Path, patterns: list[str]) -> list[str]:
    """The build context's files as git tracks them (plus untracked, unignored ones), minus .dockerignore."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=context,
                                capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        listed = [str(p.relative_to(context)) for p in context.rglob("*") if p.is_file()]
    return sorted(f for f in listed if (context / f).is_file() and not ignored(f, patterns))


# --------------------------------------------------------------------------- checking


@dataclass
class Plan:
    instructions: list[Instruction]
    values: dict[str, str]  # ARG defaults and ENV, as of the end of the file
    problems: list[str]
    lines: list[str]


def check(dockerfile: Path, context: Path) -> Plan:
    instructions = parse(dockerfile.read_text())
    patterns = dockerignore(context)
    values: dict[str, str] = {}
    problems: list[str] = []
    lines: list[str] = []
    if not instructions or instructions[0].keyword not in ("FROM", "ARG"):
        problems.append("the Dockerfile does not start with FROM")
    for ins in instructions:
        args = substitute(ins.args, values)
        where = f"line {ins.line}"
        if ins.keyword in ("ARG", "ENV"):
            values.update({k: substitute(v, values) for k, v in assignments(args).items()})
        elif ins.keyword in ("COPY", "ADD"):
            *sources, _dest = shlex.split(args)
            for src in sources:
                if "from" in ins.flags:
                    continue
                if src == ".":
                    continue
                path = context / src
                if not path.exists():
                    problems.append(f"{where}: COPY source {src} does not exist")
                elif ignored(src.rstrip("/"), patterns):
                    problems.append(f"{where}: COPY source {src} is excluded by .dockerignore")
        elif ins.keyword in ("RUN", "CMD", "ENTRYPOINT"):
            command = " ".join(ins.exec_form) if ins.exec_form else args
            for script in re.findall(r"\bbash\s+(scripts/[\w./-]+\.sh)", command):
                path = context / script
                if not path.exists():
                    problems.append(f"{where}: {script} does not exist")
                    continue
                syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
                if syntax.returncode:
                    problems.append(f"{where}: {script} does not parse: {syntax.stderr.strip()}")
            if ins.keyword == "RUN":
                for inner in re.findall(r"\$\(([^()]*)\)", command):
                    if shlex.split(inner)[0] not in READ_ONLY_COMMANDS:
                        continue
                    got = subprocess.run(["bash", "-c", inner], cwd=context, capture_output=True, text=True)
                    if got.returncode or not got.stdout.strip():
                        problems.append(f"{where}: $({inner}) gives nothing in the build context")
                    else:
                        command = command.replace(f"$({inner})", got.stdout.strip())
            if ins.keyword in ("CMD", "ENTRYPOINT") and ins.exec_form:
                program = ins.exec_form[0]
                if shutil.which(program) is None and not (context / program).exists():
                    problems.append(f"{where}: {ins.keyword} program {program} is not found")
            args = command
        lines.append(f"{ins.line:4d} {ins.keyword} {args}")
    return Plan(instructions, values, problems, lines)


# --------------------------------------------------------------------------- running


def run_steps(dockerfile: Path, context: Path, workdir: Path, log=print) -> int:
    """Execute the Dockerfile's COPY and RUN steps with `workdir` standing for the image's WORKDIR."""
    plan = check(dockerfile, context)
    if plan.problems:
        for p in plan.problems:
            log(f"problem: {p}")
        return 1
    patterns = dockerignore(context)
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    image_root = workdir / ".image-root"  # absolute image paths outside WORKDIR land here
    values: dict[str, str] = {}
    env = dict(os.environ)
    image_workdir = "/"
    if shutil.which("python") is None:  # the image's `python` is python3 (official python images have both)
        shim = image_root / "shim"
        shim.mkdir(parents=True, exist_ok=True)
        if not (shim / "python").exists():
            (shim / "python").symlink_to(shutil.which("python3") or sys.executable)
        env["PATH"] = f"{shim}{os.pathsep}{env.get('PATH', '')}"

    def local(path: str) -> Path:
        target = path if path.startswith("/") else f"{image_workdir.rstrip('/')}/{path}"
        if target == image_workdir or target.startswith(image_workdir.rstrip("/") + "/"):
            return workdir / target[len(image_workdir):].lstrip("/")
        return image_root / target.lstrip("/")

    roots: set[str] = set()  # absolute image paths the file has named (WORKDIR, COPY destinations)

    def mapped(command: str) -> str:
        """Image paths under a known root -> their place under `workdir` (other text untouched)."""
        for root in sorted(roots, key=len, reverse=True):
            pattern = r"(?<![\w./-])" + re.escape(root) + r"(?=[/\s\"')]|$)"
            command = re.sub(pattern, lambda _m, root=root: str(local(root)), command)
        return command

    for ins in plan.instructions:
        args = substitute(ins.args, values)
        if ins.keyword in ("ARG", "ENV"):
            values.update({k: substitute(v, values) for k, v in assignments(args).items()})
        elif ins.keyword == "WORKDIR":
            image_workdir = args if args.startswith("/") else f"{image_workdir.rstrip('/')}/{args}"
            roots.add(image_workdir.rstrip("/") or "/")
            log(f"WORKDIR {image_workdir} -> {workdir}")
        elif ins.keyword == "COPY":
            *sources, dest = shlex.split(args)
            target = local(dest)
            if dest.startswith("/"):
                roots.add(dest.rstrip("/"))
            for src in sources:
                if src == ".":
                    for rel in context_files(context, patterns):
                        (target / rel).parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(context / rel, target / rel)
                elif (context / src).is_dir():
                    shutil.copytree(context / src, target, dirs_exist_ok=True)
                else:
                    out = target / Path(src).name if dest.endswith("/") or target.is_dir() else target
                    out.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(context / src, out)
            log(f"COPY {' '.join(sources)} -> {target}")
        elif ins.keyword == "RUN":  # as in Docker, $NAME in a RUN step is left to the shell (ENV/ARG are set)
            command = ins.exec_form and shlex.join(ins.exec_form) or ins.args
            if any(word in command for word in SYSTEM_STEPS):
                log(f"RUN (skipped, a system step): {command}")
                continue
            command = mapped(command)
            log(f"RUN {command}")
            step_env = {**env, **{k: mapped(v) for k, v in values.items()}}  # image paths as of this step
            done = subprocess.run(["bash", "-ec", command], cwd=workdir, env=step_env)
            if done.returncode:
                log(f"step at line {ins.line} failed with exit status {done.returncode}")
                return 1
        else:
            log(f"{ins.keyword} {args} (nothing to do outside Docker)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dockerfile", type=Path, default=REPO / "Dockerfile")
    ap.add_argument("--context", type=Path, default=None, help="the build context (default: the Dockerfile's folder)")
    ap.add_argument("--run", type=Path, metavar="DIR", help="execute the steps with DIR as the image's WORKDIR")
    args = ap.parse_args(argv)
    context = (args.context or args.dockerfile.parent).resolve()
    if args.run:
        return run_steps(args.dockerfile, context, args.run)
    plan = check(args.dockerfile, context)
    print("\n".join(plan.lines))
    for p in plan.problems:
        print(f"problem: {p}")
    print(f"{len(plan.instructions)} instructions, {len(plan.problems)} problems")
    return 1 if plan.problems else 0


if __name__ == "__main__":
    sys.exit(main())
