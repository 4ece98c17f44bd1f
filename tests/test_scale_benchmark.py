"""The scale benchmark's scenarios against a server that pushes back (benchmarks/scale.py): on a secure simulator
the controller gets the ServiceAccount of manifests/ and the neighbour another one, each classified by API
Priority and Fairness as such, and the neighbour's answers are split into the idle and the measured window."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks import scale
from tfjob_sim.testing.waiting import eventually


def answer(t: float, latency: float, status: int = 200) -> dict[str, Any]:
    return {"t": t, "latency": latency, "status": status}


def test_the_neighbours_answers_are_counted_in_the_window_they_were_sent_in() -> None:
    answers = [
        answer(10.0, 0.001),
        answer(10.2, 0.003),
        answer(10.4, 0.5, 429),  # sent idle, answered after the phase began: still idle
        answer(11.0, 0.020),
        answer(11.2, 0.040),
        answer(11.4, 0.1, 429),
        answer(11.6, 5.0, 0),  # no response
        answer(12.0, 0.002),  # sent after the phase ended: in neither window
    ]
    windows = scale.neighbour_windows(answers, began=10.5, ended=12.0)
    assert windows["idle"] == {
        "n": 2,
        "p50": 0.001,
        "p99": 0.003,
        "max": 0.003,
        "rejected": 1,
        "other": 0,
        "seconds": 0.5,
    }
    during = windows["during"]
    assert (during["n"], during["p50"], during["max"], during["rejected"], during["other"]) == (2, 0.020, 0.040, 1, 1)
    assert during["seconds"] == 1.5


async def flow_schema(env: scale.Env, token: str) -> tuple[str, str]:
    """(the user a token authenticates as, the UID of the FlowSchema its request was classified in)."""
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    async with env.session.post(
        env.sim.url + "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        json=review,
        headers={"Authorization": f"Bearer {token}"},
    ) as resp:
        assert resp.status == 201, await resp.text()
        body = await resp.json()
        return body["status"]["userInfo"]["username"], resp.headers["X-Kubernetes-PF-FlowSchema-UID"]


def tokens(env: scale.Env) -> tuple[str, str]:
    """The controller's token (in the kubeconfig it is given) and the neighbour's."""
    assert env.controller_kubeconfig is not None
    kubeconfig = yaml.safe_load(Path(env.controller_kubeconfig).read_text())
    return kubeconfig["users"][0]["user"]["token"], (env.tmp / "neighbour.token").read_text()


async def test_on_a_secure_simulator_the_controller_and_the_neighbour_are_service_accounts() -> None:
    async with scale.environment(3, sim_args=[scale.SECURE]) as env:
        assert env.controller_kubeconfig is not None and env.neighbour is not None
        schema = await env.sim.call("GET", "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/service-accounts")
        controller, neighbour = tokens(env)
        assert await flow_schema(env, controller) == (
            "system:serviceaccount:tfjob-controller:tfjob-controller",
            schema["metadata"]["uid"],
        )
        assert await flow_schema(env, neighbour) == (
            "system:serviceaccount:default:neighbour",
            schema["metadata"]["uid"],
        )

        env.neighbour.start()
        await eventually(lambda: len(env.neighbour.answers()) >= 2, what="the neighbour's first answers")
        env.neighbour.began = time.time()
        await eventually(
            lambda: any(a["t"] >= env.neighbour.began for a in env.neighbour.answers()), what="an answer after it"
        )
        env.neighbour.ended = time.time()
        figures = await scale.apf_figures(env)
        # over TLS with the server's CA, authorized to read its ConfigMap: every answer a 200
        for window in ("idle", "during"):
            assert figures["neighbour"][window]["n"] >= 1
            assert (figures["neighbour"][window]["rejected"], figures["neighbour"][window]["other"]) == (0, 0)
        # the server serves the rejection series (no sample in it yet: no 429); no controller ran
        assert figures["rejected"] == {}
        assert figures["controller_429"] is None
