"""Every policy says in one line what it does and what each parameter means; the page reads both."""

from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import ServerSettings
from engine.policies import POLICIES


def test_every_policy_has_a_one_line_description():
    for name, cls in POLICIES.items():
        text = cls.__dict__.get("description")
        assert text and "\n" not in text and 30 < len(text) < 220, name


def test_every_parameter_says_what_it_means():
    for name, cls in POLICIES.items():
        for field, info in cls.Params.model_fields.items():
            assert info.description and len(info.description) > 8, f"{name}.{field}"


def test_the_policies_endpoint_carries_descriptions_and_parameter_meanings():
    with TestClient(create_app(ServerSettings(replay_only=True))) as client:
        schemas = client.get("/api/policies").json()
    assert list(schemas) == list(POLICIES)
    for name, schema in schemas.items():
        assert schema["description"] == POLICIES[name].description
        for field, prop in schema.get("properties", {}).items():
            assert prop["description"], f"{name}.{field}"
    assert schemas["talon"]["properties"]["mu"]["default"] == 0.03
