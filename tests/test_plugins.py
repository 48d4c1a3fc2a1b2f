"""The plugin manager: entry points loaded one by one, broken plugins reported, not fatal."""
import pytest

from pkb_core.errors import PluginError
from pkb_core.plugin.manager import backend_infos, get_plugin_manager

BACKEND = '''
from pkb_core.plugin.backend import BackendInfo
from pkb_core.plugin.hookspecs import hookimpl

@hookimpl
def pkb_backend_info():
    return BackendInfo(name="{name}", devices=("cpu",), description="test backend")
'''


def test_builtins_load_through_entry_points():
    pm = get_plugin_manager()
    keys = {r.key for r in pm.records if not r.error}
    assert {"pkb.backends:reference", "pkb.problems:builtin"} <= keys
    assert "reference" in backend_infos(pm)


def test_broken_plugin_is_reported_and_skipped(fake_dist, pkb_invoke):
    fake_dist("pkbtest-broken", {"pkb.backends": {"broken": "pkbtest_broken"}},
              {"pkbtest_broken": "raise ImportError('needs libfoo')\n"})
    pm = get_plugin_manager()
    errors = {r.key: r for r in pm.load_errors}
    assert "needs libfoo" in errors["pkb.backends:broken"].error
    assert errors["pkb.backends:broken"].distribution == "pkbtest-broken"
    assert "reference" in backend_infos(pm)  # the others still load
    assert pkb_invoke("--help").exit_code == 0
    listing = pkb_invoke("plugins")
    assert "needs libfoo" in listing.output


def test_strict_mode_makes_a_broken_plugin_fatal(fake_dist, monkeypatch):
    fake_dist("pkbtest-broken2", {"pkb": {"broken2": "pkbtest_broken2"}}, {"pkbtest_broken2": "1/0\n"})
    monkeypatch.setenv("PKB_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="pkb:broken2 from pkbtest-broken2"):
        get_plugin_manager()


def test_misspelt_hook_is_rejected_with_its_name(fake_dist):
    source = BACKEND.format(name="typo") + "\n@hookimpl\ndef pkb_backend_complie(state, problem, solution):\n    pass\n"
    fake_dist("pkbtest-typo", {"pkb.backends": {"typo": "pkbtest_typo"}}, {"pkbtest_typo": source})
    pm = get_plugin_manager()
    error = {r.key: r.error for r in pm.load_errors}["pkb.backends:typo"]
    assert "pkb_backend_complie" in error
    assert "typo" not in backend_infos(pm)


def test_same_name_in_two_groups_loads_both(fake_dist):
    fake_dist("pkbtest-twin", {"pkb.backends": {"twin": "pkbtest_twin_backend"}, "pkb": {"twin": "pkbtest_twin_cmd"}},
              {"pkbtest_twin_backend": BACKEND.format(name="twin"),
               "pkbtest_twin_cmd": "from pkb_core.plugin.hookspecs import hookimpl\n"
                                   "@hookimpl\ndef pkb_register_commands(cli):\n"
                                   "    @cli.command()\n    def twin():\n        print('twin command')\n"})
    pm = get_plugin_manager()
    keys = {r.key for r in pm.records if not r.error}
    assert {"pkb.backends:twin", "pkb:twin"} <= keys


def test_worker_loads_exactly_the_selected_backend(fake_dist):
    fake_dist("pkbtest-other", {"pkb.backends": {"other": "pkbtest_other"}},
              {"pkbtest_other": BACKEND.format(name="other")})
    pm = get_plugin_manager(backend="reference")
    assert set(backend_infos(pm)) == {"reference"}


def test_disabled_plugins_are_not_loaded(monkeypatch):
    monkeypatch.setenv("PKB_DISABLED_PLUGINS", "pkb.problems:builtin")
    pm = get_plugin_manager()
    assert "pkb.problems:builtin" not in {r.key for r in pm.records}


def test_extra_command_from_plugin(fake_dist, pkb_invoke):
    fake_dist("pkbtest-cmd", {"pkb": {"hello": "pkbtest_cmd"}},
              {"pkbtest_cmd": "import click\nfrom pkb_core.plugin.hookspecs import hookimpl\n"
                              "@hookimpl\ndef pkb_register_commands(cli):\n"
                              "    @cli.command()\n    def hello():\n        click.echo('hello from a plugin')\n"})
    assert pkb_invoke("hello").output.strip() == "hello from a plugin"
