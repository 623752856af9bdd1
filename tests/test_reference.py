"""The documentation's generated pages are what they describe: the configuration reference the programs' flag
definitions, fedctl's page its commands, the API page proto/, the site's home the README."""

import pytest

from federation.cli import reference
from federation.v1 import admin_pb2, agent_pb2, jobs_pb2, scheduler_pb2
from tests.conftest import REPO


def test_the_configuration_reference_is_current() -> None:
    text = (REPO / "docs" / "reference" / "configuration.md").read_text()
    assert reference.render() in text, "docs/reference/configuration.md is out of date: run `make reference`"


@pytest.mark.parametrize("page", ["reference/fedctl.md", "reference/api.md", "index.md"])
def test_each_generated_page_is_current(page: str) -> None:
    expected = {path.relative_to(REPO / "docs").as_posix(): text for path, text in reference.pages().items()}
    assert (REPO / "docs" / page).read_text() == expected[page], f"docs/{page} is out of date: run `make reference`"


def test_every_option_of_the_three_programs_is_in_it() -> None:
    table = reference.render()
    for flag in ("--heartbeat-timeout", "--lost-grace", "--database-url", "--simulate", "--admin-listen",
                 "--topology-label", "--listen"):
        assert f"`{flag}`" in table
    for env in ("FEDERATION_DATABASE_URL", "MEMBER_CLUSTER", "FEDERATION_SERVER", "MEMBER_AGENT_LOG_LEVEL"):
        assert f"`{env}`" in table


def test_every_fedctl_command_has_its_section_and_every_option_a_meaning() -> None:
    from federation.cli.main import cli

    page = reference.fedctl_page()
    for name in ("fedctl submit", "fedctl get", "fedctl queue create", "fedctl token revoke", "fedctl dev demo"):
        assert f"\n## {name}\n" in page
    assert f"\n## fedctl {sorted(cli.commands)[-1]}\n" in page
    assert "|  |\n" not in page, "an option without help: give it one"


def test_every_rpc_and_message_of_the_api_is_on_its_page() -> None:
    page = reference.api_page()
    for module in (admin_pb2, agent_pb2, jobs_pb2, scheduler_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            assert f"\n## {service.name}\n" in page
            for method in service.methods:
                assert f"| `{method.name}` |" in page
        for message in module.DESCRIPTOR.message_types_by_name.values():
            assert f"\n### {message.name}\n" in page
    assert "| `after_sequence` | `int64` |" in page  # with the field's type
