"""`testbed --help` groups every command by what a user does with it; `--version` says which."""

from testbed.cli import HELP_PANELS, _register, app, main


def test_every_command_sits_in_one_panel():
    _register()
    names = [i.name or i.callback.__name__ for i in [*app.registered_commands,
                                                       *app.registered_groups] if not i.hidden]
    panelled = [n for names_ in HELP_PANELS.values() for n in names_]
    assert sorted(panelled) == sorted(set(panelled))  # no command in two panels
    assert set(names) == set(panelled), set(names) ^ set(panelled)


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("testbed ")


def test_the_testbed_file_is_the_same_option_in_every_command(tmp_path, capsys):
    from tests.test_readme_commands import _parse

    for argv in (["up", "-t", "x.yaml"], ["up", "--config", "x.yaml"], ["demo", "--testbed", "x"],
                 ["slice", "apply", "-t", "x.yaml"], ["slice", "list", "-c", "x.yaml"],
                 ["render", "open5gs", "--testbed", "x.yaml", "-o", "out"]):
        _parse(argv)
    assert main(["slice", "apply", "a.yaml", "-t", "b.yaml", "--dry-run"]) != 0
    assert "two testbed files: a.yaml and --testbed b.yaml" in capsys.readouterr().err


def test_progress_is_turned_off_by_one_spelling_everywhere():
    from tests.test_readme_commands import _parse

    for argv in (["load", "imgcls", "--url", "http://x", "--rate", "1", "--duration", "1"],
                 ["run", "x.yaml"], ["reproduce"]):
        for flag in ("--no-progress", "--quiet"):
            _parse([*argv, flag])


def test_a_table_is_a_table_and_a_load_a_multiplier():
    from tests.test_readme_commands import _parse

    _parse(["sim", "compare", "--table", "5.1", "--table", "5.2"])
    _parse(["sim", "compare", "--load", "5.1"])  # the older spelling
    _parse(["sim", "eval", "--load", "2"])


def test_the_lab_is_reached_one_way_and_the_old_spelling_is_hidden(capsys):
    from tests.test_readme_commands import _parse

    _parse(["up", "--profile", "lab", "-i", "inv.yml", "--rendered", "r", "--manifests", "m",
            "--check"])  # everything `lab up` took
    assert main(["--help"]) == 0
    listing = capsys.readouterr().out
    assert "│ up " in listing and "│ lab " not in listing
    assert main(["lab", "--help"]) == 0
    assert "Old spelling of `testbed up|down|status --profile lab`" in capsys.readouterr().out


def test_the_traces_option_has_one_default_and_one_variable(monkeypatch):
    from typer.main import get_command

    _register()
    cmd = get_command(app)
    seen = set()
    for path in (["reproduce"], ["sim", "eval"], ["sim", "tables"], ["sim", "compare"],
                 ["train"], ["tune"]):
        c = cmd
        for name in path:
            c = c.commands[name]
        (opt,) = [p for p in c.params if p.name == "traces"]
        seen.add((opt.default, opt.envvar, "shipped with testbed" in (opt.help or "")))
    # no default folder: the command reads the paper's traces shipped with testbed
    assert seen == {(None, "TESTBED_TRACES", True)}


def test_each_command_is_imported_from_the_module_the_panels_name():
    """`testbed status` imports only testbed.cli.net: the table must say where each command is."""
    from testbed.cli import COMMAND_MODULES

    _register()
    for info in app.registered_commands:
        name = info.name or info.callback.__name__
        assert info.callback.__module__ == f"testbed.cli.{COMMAND_MODULES[name][0]}", name
    for info in app.registered_groups:
        modules = {c.callback.__module__ for c in info.typer_instance.registered_commands}
        assert modules == {f"testbed.cli.{m}" for m in COMMAND_MODULES[info.name]}, info.name


def test_a_named_command_imports_its_module_alone():
    import subprocess
    import sys

    probe = ("import sys\nfrom testbed.cli import _register\n_register(['status', '--json'])\n"
             "print(sorted(m for m in sys.modules if m.startswith('testbed.cli.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.strip() == "['testbed.cli.checks', 'testbed.cli.net']"
