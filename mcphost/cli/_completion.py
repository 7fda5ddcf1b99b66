"""`mcphost completion bash|zsh|fish`: a shell completion script generated from the parser itself.

Owns walking the argparse parser (commands, nested actions, each one's flags and fixed choices) and
writing the script for one shell. Hand-written rather than a library: the one small, well-kept option,
shtab, has no fish support, and the walk is short; generating from the parser keeps the scripts in step
with every command and flag without a list to maintain. Does not own the parser (`mcphost.cli`).

Invariants: standard library only (`completion` runs without importing the server); the scripts
complete command words, flags and `choices` values, and leave file names to the shell's default.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import cast


@dataclass
class _Node:
    path: tuple[str, ...]
    """Command words leading here: () for the top level, ("kb", "search") for a nested action."""
    words: list[str] = field(default_factory=list[str])
    """Sub-commands and flags completed after `path`."""
    choices: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    """A flag's fixed values (`--status` → queued, running, …)."""
    positional: list[str] = field(default_factory=list[str])
    """Fixed values of a positional argument (`completion` → bash, zsh, fish)."""


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[_Node]:
    node = _Node(path)
    children: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:  # pyright: ignore[reportPrivateUsage]  # argparse has no public walk
        if isinstance(action, argparse._SubParsersAction):  # pyright: ignore[reportPrivateUsage]  # same
            # add_subparsers() maps each command name to its parser; the stubs leave the mapping untyped.
            choices = cast(
                "dict[str, argparse.ArgumentParser]",
                action.choices,  # pyright: ignore[reportUnknownMemberType]  # typeshed: values untyped
            )
            for name, sub in choices.items():
                node.words.append(name)
                children.append((name, sub))
        elif action.option_strings:
            long_flags = [o for o in action.option_strings if o.startswith("--")]
            node.words += long_flags
            if action.choices is not None:
                for flag in long_flags:
                    node.choices[flag] = [str(c) for c in action.choices]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]  # Iterable[Any]
        elif action.choices is not None:
            node.positional += [str(c) for c in action.choices]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]  # Iterable[Any]
    yield node
    for name, sub in children:
        yield from _walk(sub, (*path, name))


def _bash(nodes: list[_Node], prog: str) -> str:
    lines = [
        f'# bash completion for {prog}: eval "$({prog} completion bash)" (or save it in',
        "# ~/.local/share/bash-completion/completions/mcphost)",
        f"_{prog}_complete() {{",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" path="" w i',
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        w="${COMP_WORDS[i]}"',
        '        case "$path|$w" in',
    ]
    for node in nodes:
        for word in node.words:
            if not word.startswith("-"):
                key = " ".join(node.path)
                lines.append(f'            {shlex.quote(f"{key}|{word}")}) path="${{path:+$path }}{word}" ;;')
    lines += ["        esac", "    done", '    case "$path|$prev" in']
    for node in nodes:
        key = " ".join(node.path)
        for flag, values in node.choices.items():
            lines.append(
                f'        {shlex.quote(f"{key}|{flag}")}) COMPREPLY=($(compgen -W {shlex.quote(" ".join(values))} -- "$cur")); return ;;'
            )
    lines += ["    esac", '    case "$path" in']
    for node in nodes:
        words = " ".join([*node.words, *node.positional])
        lines.append(
            f'        {shlex.quote(" ".join(node.path))}) COMPREPLY=($(compgen -W {shlex.quote(words)} -- "$cur")) ;;'
        )
    lines += ["    esac", "}", f"complete -o default -F _{prog}_complete {prog}", ""]
    return "\n".join(lines)


def _zsh(nodes: list[_Node], prog: str) -> str:
    # zsh runs the bash script through bashcompinit: one generator, the same behaviour in both shells.
    return (
        f'#compdef {prog}\n# zsh completion for {prog}: eval "$({prog} completion zsh)" in ~/.zshrc\n'
        "autoload -U +X compinit && compinit\nautoload -U +X bashcompinit && bashcompinit\n"
        + _bash(nodes, prog)
    )


def _fish(nodes: list[_Node], prog: str) -> str:
    lines = [f"# fish completion for {prog}: {prog} completion fish > ~/.config/fish/completions/{prog}.fish"]
    lines.append(f"complete -c {prog} -f")
    for node in nodes:
        # The condition: exactly the words of `path` were given, and none of this level's sub-commands.
        subs = [w for w in node.words if not w.startswith("-")]
        conditions = [f"__fish_seen_subcommand_from {w}" for w in node.path]
        if not node.path:
            top = [w for w in nodes[0].words if not w.startswith("-")]
            conditions.append("not __fish_seen_subcommand_from " + " ".join(top))
        elif subs:
            conditions.append("not __fish_seen_subcommand_from " + " ".join(subs))
        condition = shlex.quote("; and ".join(conditions)) if conditions else "''"
        for word in node.words:
            if word.startswith("--"):
                values = node.choices.get(word)
                extra = f" -r -a {shlex.quote(' '.join(values))}" if values else ""
                lines.append(f"complete -c {prog} -n {condition} -l {word[2:]}{extra}")
            else:
                lines.append(f"complete -c {prog} -n {condition} -a {shlex.quote(word)}")
        if node.positional:
            lines.append(f"complete -c {prog} -n {condition} -a {shlex.quote(' '.join(node.positional))}")
    return "\n".join(lines) + "\n"


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    nodes = list(_walk(parser))
    prog = parser.prog
    match shell:
        case "bash":
            return _bash(nodes, prog)
        case "zsh":
            return _zsh(nodes, prog)
        case _:
            return _fish(nodes, prog)
