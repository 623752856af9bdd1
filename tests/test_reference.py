"""The README's configuration reference is what the programs' flag definitions say."""

from federation.cli import reference
from tests.conftest import REPO


def test_the_readme_configuration_reference_is_current() -> None:
    text = (REPO / "README.md").read_text()
    assert reference.render() in text, "the README's configuration reference is out of date: run `make reference`"


def test_every_option_of_the_three_programs_is_in_it() -> None:
    table = reference.render()
    for flag in ("--heartbeat-timeout", "--lost-grace", "--database-url", "--simulate", "--admin-listen",
                 "--topology-label", "--listen"):
        assert f"`{flag}`" in table
    for env in ("FEDERATION_DATABASE_URL", "MEMBER_CLUSTER", "FEDERATION_SERVER", "MEMBER_AGENT_LOG_LEVEL"):
        assert f"`{env}`" in table
