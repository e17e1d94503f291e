"""kopf's record of the handled spec (controller/reconcile/diffbase.py): a digest, and of the spec the
reconcile judged, not of the (older) event kopf happened to hold."""

from __future__ import annotations

from typing import Any

import kopf

from specdeploy.api.spec import API_GROUP
from specdeploy.controller.reconcile.diffbase import DigestDiffBaseStorage

KEY = f"{API_GROUP}/last-handled-configuration"


def _cr(k: int, generation: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
            "metadata": {"name": "a", "namespace": "ns", "uid": "uid-1", "generation": generation,
                         "annotations": dict(annotations or {})},
            "spec": {"draft": {"numSpeculativeTokens": k}}}


def _stored(storage: DigestDiffBaseStorage, event: dict[str, Any]) -> dict[str, str]:
    """The annotations after kopf stored the event's essence as handled."""
    body = kopf.Body(event)
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=storage.build(body=body))
    return {k: v for k, v in patch["metadata"]["annotations"].items() if k == KEY}


def test_an_unchanged_spec_is_no_diff_and_a_changed_one_is() -> None:
    storage = DigestDiffBaseStorage(prefix=API_GROUP, key="last-handled-configuration")
    stored = _stored(storage, _cr(3, 2))
    assert stored[KEY].startswith("sha256:")
    assert storage.fetch(body=kopf.Body(_cr(3, 2, stored)))  # the essence itself: no diff
    assert storage.fetch(body=kopf.Body(_cr(5, 3, stored))) == {}  # an empty base: a diff


def test_the_judged_spec_is_recorded_so_an_edit_back_to_the_events_spec_is_not_lost() -> None:
    """kopf held the event of generation 16 (k=3); the reconcile read the live generation 17
    (k=5) and deployed k=5; the user's last edit, generation 21, sets k=3 again."""
    storage = DigestDiffBaseStorage(prefix=API_GROUP, key="last-handled-configuration")
    storage.judged(_cr(5, 17))
    stored = _stored(storage, _cr(3, 16))
    assert storage.fetch(body=kopf.Body(_cr(3, 21, stored))) == {}, "k=3 again must be a change: k=5 is what runs"
    assert storage.fetch(body=kopf.Body(_cr(5, 17, stored))), "the judged spec itself is handled"


def test_a_judged_spec_is_used_once_and_forgotten_with_its_object() -> None:
    storage = DigestDiffBaseStorage(prefix=API_GROUP, key="last-handled-configuration")
    storage.judged(_cr(5, 17))
    _stored(storage, _cr(3, 16))
    again = _stored(storage, _cr(3, 16))  # a later store without a new judgement: the event's own spec
    assert storage.fetch(body=kopf.Body(_cr(3, 16, again)))
    storage.judged(_cr(7, 18))
    storage.forget("uid-1")  # a reconcile that was cut off judged nothing kopf will record
    after = _stored(storage, _cr(3, 16))
    assert storage.fetch(body=kopf.Body(_cr(3, 16, after)))
