"""Config loading: the embedded default, env overrides, and precise errors that start nothing."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from mcphost.config import DEFAULT_AGENT_RUNNER, load_settings, settings_from_mapping
from mcphost.errors import ConfigError

KEY = '[[api_keys]]\nname = "{name}"\n{source}\nrole = "{role}"\n'
ENV_A = 'key_env = "CI_KEY"'
ENV_B = 'key_env = "OTHER_KEY"'
HASH = "ab" * 32


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mcphost.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_no_file_gives_the_embedded_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = load_settings(environ={})
    assert settings.source == "<embedded default>"
    assert settings.database_url == "sqlite+aiosqlite:///.mcphost/mcphost.db"
    assert [(a.id, a.runner, a.event_types) for a in settings.agents] == [
        ("default", DEFAULT_AGENT_RUNNER, ["message.received"])
    ]
    assert any(p.display_name == "echo" for p in settings.all_plugins())


def test_env_overrides_the_host_table(tmp_path: Path) -> None:
    path = write(tmp_path, '[host]\nlisten = "127.0.0.1:9000"\nrun_timeout_s = 10\n')
    settings = load_settings(
        path,
        environ={
            "MCPHOST_LISTEN": "127.0.0.1:9100",
            "MCPHOST_MAX_CONCURRENT_RUNS": "3",
            "MCPHOST_DATABASE_POOL_SIZE": "24",
        },
    )
    assert settings.host.listen == "127.0.0.1:9100"
    assert settings.host.max_concurrent_runs == 3
    assert settings.host.database_pool_size == 24
    assert settings.host.run_timeout_s == 10


def test_a_config_file_without_agents_keeps_the_default_agent(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, "[host]\n"), environ={})
    assert [a.id for a in settings.agents] == ["default"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[host]\nlisten = "nowhere"\n', "host.listen: expected HOST:PORT"),
        ("[host]\nrun_timeout_s = -1\n", "host.run_timeout_s: Input should be greater than 0"),
        ("[host]\nlisten_port = 1\n", "host.listen_port: unknown key"),
        (
            "[host]\ndatabase_pool_size = 3\n",
            "host.database_pool_size: Input should be greater than or equal to 4",
        ),
        (
            '[[agents]]\nid = "a"\nrunner = "echo"\n',
            "agents[0] (id 'a').runner: Runner id 'echo' must have the form",
        ),
        ('[[agents]]\nrunner = "plugin:a/b/c"\n', "agents[0].id: required key is missing"),
        (
            '[[agents]]\nid = "a"\nrunner = "plugin:a/b/c"\n[agents.approvals]\nstate_set = "yes"\n',
            "agents[0] (id 'a').approvals.state_set: Input should be 'ask'",
        ),
        (
            '[[agents]]\nid = "a"\nrunner = "plugin:a/b/c"\napprovals = { "" = "ask" }\n',
            "agents[0] (id 'a').approvals: approval key '' must be a tool name or glob",
        ),
        ("[host]\napproval_expiry_s = 0\n", "host.approval_expiry_s: Input should be greater than 0"),
        (
            '[[agents]]\nid = "a"\nrunner = "plugin:a/b/c"\nmatch = {color = "red"}\n',
            "unknown match key(s) color",
        ),
        (
            '[[agents]]\nid = "a"\nrunner = "plugin:a/b/c"\n[[agents]]\nid = "a"\nrunner = "plugin:a/b/d"\n',
            "agent id 'a' is used twice",
        ),
        (
            '[[agents]]\nid = "a"\nrunner = "plugin:a/b/c"\nresources = {knowledge_bases = ["docs"]}\n',
            "knowledge base 'docs' is not declared",
        ),
        (
            '[[agents]]\nid = "a"\nrunner = "plugin:a/b/c"\nresources = {skills = ["triage"]}\n',
            "skill 'triage' is not declared; declared: none. Add a [skills.triage] table.",
        ),
        ('[skills."Bad Name"]\ndescription = "x"\n', "skill name 'Bad Name' must be 1-64 lowercase"),
        (
            '[skills.triage]\ndisplay_name = "Triage"\n',
            "skills.triage: set 'description', or 'path' to a skill folder whose SKILL.md describes it",
        ),
        (
            '[skills.review]\npath = "no-such-folder"\n',
            "skills.review.path: ",
        ),
        (
            '[[agents]]\nid = "a"\nrunner = "plugin:mcphost/echo/default"\nsecrets = ["gh_token"]\n',
            "agents[0] (id 'a').secrets: secret 'gh_token' is not declared; declared: none. Add a "
            '[secrets.gh_token] table with env = "VAR" or file = "/path".',
        ),
        ('[secrets.gh_token]\nvariable = "GH"\n', "secrets.gh_token: set exactly one of 'env'"),
        ('[secrets.gh_token]\nenv = "A"\nfile = "b"\n', "secrets.gh_token: set exactly one of 'env'"),
        ('[secrets.gh_token]\nenv = "1BAD"\n', "secrets.gh_token.env: String should match pattern"),
        ('[secrets."GH Token"]\nenv = "GH"\n', "secret name 'GH Token' must be 1-64 lowercase"),
        (
            '[[agents]]\nid = "a"\nrunner = "plugin:mcphost/echo/default"\nworkspace = "repo-a"\n',
            "agents[0] (id 'a').workspace: workspace 'repo-a' is not in [workspaces] (declared: none); the "
            'agent\'s runs are local, so add `repo-a = "/path/to/folder"` under [workspaces].',
        ),
        (
            '[[agents]]\nid = "a"\nrunner = "plugin:mcphost/echo/default"\nworkspace = "repo-a"\n'
            '[agents.runtime]\nlabels = { pool = "a" }\n[runtimes.r1]\nworkspaces = { "repo-b" = "/srv/b" }\n',
            "agents[0] (id 'a').workspace: no [runtimes.<name>] table maps workspace 'repo-a', so no runtime "
            'could claim the agent\'s runs; add `workspaces = { "repo-a" = "/path/on/the/runtime" }` under '
            "[runtimes.<name>] for each runtime that has it.",
        ),
        (
            '[runtimes.r1]\nworkspaces = { "repo-a" = "relative/path" }\n',
            "workspace 'repo-a': 'relative/path' must be an absolute path on the runtime's machine",
        ),
        ('[tools.x]\ncommand = ["a"]\nurl = "http://x"\n', "tools.x: set exactly one of 'command'"),
        ("[host\n", "not valid TOML"),
        (
            KEY.format(name="ci", source=ENV_A, role="sender")
            + KEY.format(name="ci", source=ENV_B, role="reader"),
            "api_keys[1] (name 'ci').name: the name 'ci' is used twice; names must be unique.",
        ),
        (
            '[host]\napi_key = "k"\n' + KEY.format(name="api_key", source=ENV_A, role="reader"),
            "the name 'api_key' is used twice ([host] api_key is named so)",
        ),
        (
            KEY.format(name="ci", source=f"{ENV_A}\nkey_sha256 = '{HASH}'", role="sender"),
            "api_keys[0]: set exactly one of 'key_env' (the environment variable holding the key) or "
            "'key_sha256'",
        ),
        (KEY.format(name="ci", source="", role="sender"), "api_keys[0]: set exactly one of 'key_env'"),
        (
            KEY.format(name="ci", source=ENV_A, role="sender")
            + KEY.format(name="cd", source=ENV_A, role="admin"),
            "api_keys[1] (name 'cd'): its key_env 'CI_KEY' is also the key of 'ci'; one key has one role",
        ),
        (
            KEY.format(name="a", source=f"key_sha256 = '{HASH}'", role="reader")
            + KEY.format(name="b", source=f"key_sha256 = '{HASH.upper()}'", role="admin"),
            "api_keys[1] (name 'b'): its key_sha256 is also the key of 'a'",
        ),
        (
            KEY.format(name="ci", source="key_sha256 = 'abc'", role="reader"),
            "api_keys[0].key_sha256: String should match",
        ),
        (
            KEY.format(name="CI Bot", source=ENV_A, role="reader"),
            "api_keys[0].name: String should match pattern",
        ),
        (
            KEY.format(name="ci", source=ENV_A, role="root"),
            "api_keys[0].role: Input should be 'admin', 'operator'",
        ),
        (
            KEY.format(name="ci", source=ENV_A, role="reader") + 'agents = ["default"]\n',
            "'agents' limits a 'sender' key; a 'reader' key reaches every agent",
        ),
        (
            KEY.format(name="ci", source=ENV_A, role="sender") + 'agents = ["nope"]\n',
            "api_keys[0] (name 'ci').agents: agent 'nope' is not configured; known agents: default.",
        ),
        (
            '[host]\npublic = ["metrics", "everything"]\n',
            "host.public[1]: Input should be 'metrics', 'openapi' or 'docs'",
        ),
        (
            '[[webhooks]]\nurl = "http://127.0.0.1:9/h"\nsecret = "whsec_a2trdGtra2tra2tra2traw=="\ntimeout_s = 55\n',
            "webhooks[0].timeout_s: timeout_s 55 is longer than 50 s: a send and the recording of its "
            "outcome must end within the 60 s lease",
        ),
    ],
)
def test_config_errors_name_the_file_the_key_and_the_expectation(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_settings(path, environ={})
    assert str(path) in str(info.value)
    assert expected in str(info.value)


def test_api_keys_load_without_their_variables_set_which_serve_checks(tmp_path: Path) -> None:
    """A client command loads the same file on a machine without the server's keys."""
    path = write(tmp_path, KEY.format(name="ci", source=ENV_A, role="sender") + 'agents = ["default"]\n')
    settings = load_settings(path, environ={})
    [key] = settings.api_keys
    assert (key.name, key.key_env, key.role, key.agents) == ("ci", "CI_KEY", "sender", ["default"])
    assert settings.host.public == ["openapi", "docs"]


def test_a_named_config_file_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "missing.toml", environ={})


def test_mcphost_config_env_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[[agents]]\nid = "x"\nrunner = "plugin:a/b/c"\n')
    settings = load_settings(environ={"MCPHOST_CONFIG": str(path)})
    assert [a.id for a in settings.agents] == ["x"]


def test_the_readme_config_sample_is_a_valid_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = readme.index("```toml\n[host]") + len("```toml\n")
    sample = tomllib.loads(readme[start : readme.index("```", start)])
    # The sample's skill folder is the reader's own, next to their config file (here: the working folder).
    for skill in sample.get("skills", {}).values():
        if "path" in skill:
            folder = tmp_path / skill["path"]
            folder.mkdir(parents=True)
            (folder / "SKILL.md").write_text('---\nname: review\ndescription: "Review a change."\n---\n')
    monkeypatch.chdir(tmp_path)
    settings = settings_from_mapping(sample, source="README.md", environ={})
    assert {"host", "plugins", "agents", "knowledge", "skills"} <= set(sample)
    [support] = settings.agents
    assert support.resources.skills == ["triage"]
    assert support.budget.calls == 200


def test_a_skill_folder_is_relative_to_the_config_file_and_describes_itself(tmp_path: Path) -> None:
    folder = tmp_path / "skills" / "review"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        '---\nname: review\ndescription: "Review a change for bugs."\n---\n# Review\n'
    )
    secret = tmp_path / "token.txt"
    path = write(
        tmp_path,
        '[skills.review]\npath = "skills/review"\n[secrets.gh_token]\nfile = "token.txt"\n'
        '[workspaces]\nrepo-a = "repo"\n',
    )
    settings = load_settings(path, environ={})
    assert settings.skills["review"].path == folder
    assert settings.skills["review"].description == "Review a change for bugs."
    assert settings.secrets["gh_token"].file == secret
    assert settings.secrets["gh_token"].variable_of("gh_token") == "GH_TOKEN"
    assert settings.workspaces["repo-a"] == tmp_path / "repo"
