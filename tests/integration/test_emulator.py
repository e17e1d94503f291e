"""The emulator names objects created by `generateName` as the API server does, so every Event
kopf posts is stored (kopf posts each with `generateName: kopf-event-`), and refuses a create
with neither a name nor a generateName."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from .conftest import NS, Cluster, Operator, eventually, example, with_identity

EVENTS_PATH = f"/api/v1/namespaces/{NS}/events"
LLAMA = example("llama-3.1-8b-eagle3.yaml")


def _event(reason: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"namespace": NS, **meta},
            "involvedObject": {"kind": "SpeculativeDeployment", "namespace": NS, "name": "x"},
            "type": "Normal", "reason": reason, "message": reason}


async def test_creates_by_generate_name_each_get_a_new_name(emulator: Any, cluster: Cluster) -> None:
    names = []
    for i in range(20):
        response = await emulator.post(EVENTS_PATH, json=_event(f"R{i}", generateName="kopf-event-"))
        assert response.status in (200, 201), await response.text()
        names.append((await response.json())["metadata"]["name"])
    # The API server's generator: the prefix, then 5 of its consonants and digits.
    assert all(re.fullmatch(r"kopf-event-[bcdfghjklmnpqrstvwxz2456789]{5}", n) for n in names), names
    assert len(set(names)) == 20
    assert sorted(e["reason"] for e in cluster.events()) == sorted(f"R{i}" for i in range(20))
    # A long prefix is cut so that the name stays a 63-character label.
    response = await emulator.post(EVENTS_PATH, json=_event("long", generateName="p" * 80))
    assert len((await response.json())["metadata"]["name"]) == 63
    # An explicit name wins over generateName, and is refused when taken.
    response = await emulator.post(EVENTS_PATH, json=_event("named", name="fixed", generateName="kopf-event-"))
    assert (await response.json())["metadata"]["name"] == "fixed"
    response = await emulator.post(EVENTS_PATH, json=_event("again", name="fixed"))
    assert response.status == 409


async def test_a_create_with_neither_name_nor_generate_name_is_refused(emulator: Any, cluster: Cluster) -> None:
    response = await emulator.post(EVENTS_PATH, json=_event("nameless"))
    assert response.status == 422
    body = await response.json()
    assert body["reason"] == "Invalid" and "name or generateName is required" in body["message"]
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    assert cluster.events() == []


async def test_two_events_of_one_cr_both_land(operator: Operator, cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    """An invalid spec (one Warning per finding), then the fix (Normal Events): every Event
    stored, as kopf posted them (before, every Event after the first collided on the name None:
    409). The log names the CR and the verdict of each reconcile."""
    doc = copy.deepcopy(LLAMA)
    doc["metadata"]["name"] = "two-events"
    doc["spec"]["draft"]["numSpeculativeTokens"] = 0
    await cluster.create(with_identity(doc, "uid-two-events"))
    await eventually(lambda: cluster.condition("two-events", "Validated").get("status") == "False", what="Validated=False")
    await cluster.patch_spec("two-events", {"draft": {"numSpeculativeTokens": 3}}, generation=2)
    await eventually(lambda: cluster.condition("two-events", "Planned").get("status") == "True", what="Planned=True")

    def mine() -> list[dict[str, Any]]:
        return [e for e in cluster.events() if e["involvedObject"]["name"] == "two-events"]

    # The create: its one finding (not Validated=False and Stalled=True saying the same); the
    # fix: Validated and Planned back to True.
    await eventually(lambda: len(mine()) >= 3, what="the three Events")
    events = mine()
    said = [(e["type"], e["reason"], e["message"].split(":")[0]) for e in events]
    assert said == [("Warning", "InvalidSpec", "spec.draft.numSpeculativeTokens"),
                    ("Normal", "Valid", "Validated=True"), ("Normal", "Planned", "Planned=True")], said
    assert all(e["metadata"]["name"].startswith("kopf-event-") for e in events)
    assert len({e["metadata"]["name"] for e in events}) == 3
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Reconciled SpeculativeDeployment")]
    assert any(m.startswith(f"Reconciled SpeculativeDeployment {NS}/two-events: invalid (InvalidSpec: spec.draft.numSpeculativeTokens")
               for m in logged), logged
    assert any(m.startswith(f"Reconciled SpeculativeDeployment {NS}/two-events: not ready") for m in logged), logged


async def test_the_telemetrys_events_land_for_a_cr_of_any_valid_name(emulator: Any, cluster: Cluster) -> None:
    """The telemetry posts its own Events (it runs outside kopf's handlers). The API server names
    them from the CR's name, cut to fit, so a 253-character CR name still gets its Events; a
    name built as '<cr>.<16 hex>' would be 270 characters, which the API server refuses."""
    import logging

    from specdeploy.controller.process.kube import Kube, load_configuration
    from specdeploy.controller.scraping.telemetry import Telemetry

    kube = Kube(load_configuration())
    telemetry = Telemetry(kube, logging.getLogger("test"))
    long_name = ".".join(["a" * 63] * 4)[:253]
    try:
        for name in ("short", long_name):
            body = {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
                    "metadata": {"name": name, "namespace": NS, "uid": f"uid-{len(name)}"}}
            await telemetry._event(body, "Warning", "AcceptanceCollapsed", "acceptance 0.4%", "2026-12-03T00:00:00Z")
    finally:
        await kube.close()
    events = {e["involvedObject"]["name"]: e for e in cluster.events()}
    assert set(events) == {"short", long_name}
    assert re.fullmatch(r"short\.[bcdfghjklmnpqrstvwxz2456789]{5}", events["short"]["metadata"]["name"])
    stored = events[long_name]["metadata"]["name"]
    assert len(stored) <= 63 and stored.startswith("a" * 58)
