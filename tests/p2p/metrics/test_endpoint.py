"""The Prometheus endpoint: valid exposition parsed back, counters that rise, names
that follow the conventions, status showing the bound URL, a busy port refused."""

from __future__ import annotations

import re
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from p2p.cli.main import EXIT_IN_USE, main
from p2p.metrics import MetricsEndpoint
from p2p.testing import MemoryNetwork, wait_until
from p2p.testing.nodes import admin_request, fast_spec, memory_swarm, running

ROOT = Path(__file__).resolve().parents[3]
NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
#: the standard collectors keep their names; everything of the node is p2p_
PREFIXES = ("p2p_", "process_", "python_")
#: labels whose values grow with the swarm: never on a node's counters
UNBOUNDED_LABELS = {"peer", "peer_id", "node", "address", "id"}


def _get(url: str, accept: str = "") -> tuple[str, str]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return reply.read().decode(), reply.headers["Content-Type"]


def _samples(text: str) -> dict[str, float]:
    return {s.name + str(sorted(s.labels.items())): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


async def test_scrape_parses_back_and_counters_rise(tmp_path: Path) -> None:
    nodes = memory_swarm(tmp_path, MemoryNetwork(seed=1), fast_spec(rounds=0),
                         metrics="127.0.0.1:0")
    nodes[0].metrics_endpoint.max_age = 0.0  # every scrape renders anew
    async with running(nodes):
        url = nodes[0].metrics_endpoint.url
        assert url is not None and url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        assert not url.endswith(":0/metrics")  # port 0 resolved
        assert nodes[1].metrics_endpoint.url != url  # one endpoint and registry per node
        status = await admin_request(nodes[0].data_dir, "status")
        assert status["metrics_url"] == url
        await wait_until(lambda: nodes[0].progress.round >= 2, timeout=60)
        first, content_type = await trio.to_thread.run_sync(_get, url)
        assert content_type.startswith("text/plain; version=0.0.4")
        await wait_until(lambda: nodes[0].progress.round >= 6 and nodes[0].model_counter(
            "global", "pushes_sent") >= 2, timeout=60)
        second, _ = await trio.to_thread.run_sync(_get, url)
        openmetrics, om_type = await trio.to_thread.run_sync(
            _get, url, "application/openmetrics-text; version=1.0.0")
    before, after = _samples(first), _samples(second)
    assert after["p2p_rounds_total[]"] > before["p2p_rounds_total[]"] >= 2
    assert after["p2p_sgd_steps_total[]"] > before["p2p_sgd_steps_total[]"]
    assert after["p2p_pushsum_pushes_sent_total[('model', 'global')]"] >= 2
    assert 0.0 <= after["p2p_test_accuracy_ratio[]"] <= 1.0
    assert after["p2p_pushsum_weight[('model', 'global')]"] > 0
    sent = [k for k in after if k.startswith("p2p_message_bytes_total") and "'sent'" in k]
    assert sent and sum(after[k] for k in sent) > 0
    assert "process_cpu_seconds_total[]" in after and "process_resident_memory_bytes[]" in after
    assert om_type.startswith("application/openmetrics-text") and openmetrics.endswith("# EOF\n")


async def test_metric_names_follow_the_conventions(tmp_path: Path) -> None:
    nodes = memory_swarm(tmp_path, MemoryNetwork(seed=2), fast_spec(rounds=2),
                         metrics="127.0.0.1:0")
    async with running(nodes):
        await wait_until(lambda: nodes[0].progress.round >= 1, timeout=60)
        text, _ = nodes[0].metrics_endpoint.exposition()
    families = list(text_string_to_metric_families(text.decode()))
    assert len(families) > 40
    for family in families:
        assert NAME.match(family.name) and family.name.startswith(PREFIXES), family.name
        assert family.documentation, family.name
        for sample in family.samples:
            if family.type == "counter":
                assert sample.name.endswith(("_total", "_created")), sample.name
            if family.name.startswith("p2p_") and family.name != "p2p_node_info":  # one series
                assert not set(sample.labels) & UNBOUNDED_LABELS, sample
        if family.type != "counter":
            assert not family.name.endswith("_total"), family.name
        for unit in ("seconds", "bytes", "ratio"):
            if unit in family.name.split("_") and family.type != "counter":
                assert family.name.endswith(unit) or family.type == "summary", family.name


@pytest.mark.usefixtures("restore_logging")  # p2p run in this process configures logging
def test_a_busy_metrics_port_is_refused_in_one_line(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        status = main(["run", "--config", str(ROOT / "examples" / "local.toml"), "--data-dir",
                       str(tmp_path / "n"), "--listen", "127.0.0.1:0", "--bootstrap", "",
                       "--metrics", f"127.0.0.1:{port}"])
    assert status == EXIT_IN_USE == 3
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == [f"p2p: error: cannot listen on 127.0.0.1:{port}: address already in use "
                     "(another program holds it; choose another port with --metrics / "
                     "metrics.listen, or port 0 for any free port)"]


async def test_the_endpoint_answers_only_metrics(tmp_path: Path) -> None:
    nodes = memory_swarm(tmp_path, MemoryNetwork(seed=4), fast_spec(nodes=2, rounds=1),
                         metrics="127.0.0.1:0")
    async with running(nodes):
        base = nodes[0].metrics_endpoint.url.removesuffix("/metrics")

        def status_of(path: str, method: str = "GET") -> int:
            try:
                with urllib.request.urlopen(urllib.request.Request(base + path, method=method),
                                            timeout=10) as reply:
                    return int(reply.status)
            except urllib.error.HTTPError as exc:
                return exc.code

        assert await trio.to_thread.run_sync(status_of, "/") == 404
        assert await trio.to_thread.run_sync(status_of, "/metrics", "POST") == 405
        assert await trio.to_thread.run_sync(status_of, "/metrics", "HEAD") == 200


async def test_scrapers_within_max_age_share_one_rendering(tmp_path: Path) -> None:
    """Any number of scrapers cost the node one rendering per format per max_age."""
    nodes = memory_swarm(tmp_path, MemoryNetwork(seed=5), fast_spec(nodes=2, rounds=0),
                         metrics="127.0.0.1:0")
    now = [100.0]
    endpoint = MetricsEndpoint(nodes[0], None, clock=lambda: now[0])
    async with running(nodes):
        await wait_until(lambda: nodes[0].progress.round >= 1, timeout=60)
        first, _ = endpoint.exposition()
        await wait_until(lambda: nodes[0].progress.round >= 3, timeout=60)
        now[0] += 0.9
        assert endpoint.exposition()[0] == first  # within max_age: the same text
        openmetrics, _ = endpoint.exposition("application/openmetrics-text; version=1.0.0")
        assert endpoint.renderings == 2 and openmetrics != first  # each format its own
        now[0] += 0.2
        later, _ = endpoint.exposition()
    assert endpoint.renderings == 3
    before, after = _samples(first.decode()), _samples(later.decode())
    assert after["p2p_rounds_total[]"] > before["p2p_rounds_total[]"]
