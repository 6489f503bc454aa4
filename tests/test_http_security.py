"""The HTTP server on loopback answers only to loopback names (DNS-rebinding guard)."""

from __future__ import annotations

from pathlib import Path

import pytest

from exactly.app import Broker
from exactly.app.http import HttpSettings, create_app
from exactly.app.http.auth import LOOPBACK_HOSTS


@pytest.fixture
def client(tmp_path: Path):
    with Broker(tmp_path / "d") as broker:
        app = create_app(broker.engine, HttpSettings(allowed_hosts=LOOPBACK_HOSTS), {"TESTING": True})
        yield app.test_client()


@pytest.mark.parametrize("host", ["127.0.0.1:8080", "localhost:8080", "[::1]:8080", "localhost"])
def test_loopback_names_are_served(client, host: str) -> None:
    assert client.get("/v3/clusters", headers={"Host": host}).status_code == 200
    assert client.get("/", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize("path", ["/v3/clusters", "/", "/metrics"])
def test_a_rebinding_name_is_refused(client, path: str) -> None:
    response = client.get(path, headers={"Host": "attacker.example:8080"})
    assert response.status_code == 421
    assert response.json["error_name"] == "MISDIRECTED_REQUEST"


def test_without_a_host_list_any_name_is_served(tmp_path: Path) -> None:
    with Broker(tmp_path / "d") as broker:
        app = create_app(broker.engine, HttpSettings(), {"TESTING": True})
        assert app.test_client().get("/v3/clusters", headers={"Host": "broker.lan"}).status_code == 200
