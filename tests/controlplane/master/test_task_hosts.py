"""One origin per task: a task's label and host, from ``proxy_url`` (with or without a wildcard)
or from the host the caller reached the master by, and which ``Host`` serves which task."""

from __future__ import annotations

import pytest

from controlplane.config.errors import ConfigError
from controlplane.master.settings import load_settings
from controlplane.master.task_hosts import NoProxyHost, proxy_url_problem, serves, task_label, task_origin

JOB = "3f2b1c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"


def origin(task_id: str = JOB, host: str | None = "127.0.0.1:8080", proxy_url: str = "", scheme: str = "http") -> str:
    return task_origin(task_id, proxy_url=proxy_url, scheme=scheme, host_header=host, proxy_port=8081)


def test_a_task_label_is_the_id_when_it_is_a_dns_label_and_a_distinct_hash_otherwise():
    assert task_label(JOB) == JOB  # job ids are UUIDs: already lowercase labels
    odd = ["Nb-Upper", "a" * 64, "has.dot", "-lead", "xn--punycode", "h-looks-hashed", "", "nb_under"]
    labels = [task_label(t) for t in odd]
    assert len(set(labels)) == len(odd) and all(label.startswith("h-") for label in labels), labels
    assert all(len(label) <= 63 and label == label.lower() and label.replace("-", "").isalnum() for label in labels)
    assert task_label("Nb-Upper") == task_label("Nb-Upper")  # stable


def test_the_task_host_comes_from_proxy_url_or_the_host_the_master_was_reached_by():
    assert origin() == f"http://{JOB}.localhost:8081"  # loopback: *.localhost resolves to it in browsers
    assert origin(host="[::1]:8080") == f"http://{JOB}.localhost:8081"
    assert origin(host="localhost:8080") == f"http://{JOB}.localhost:8081"
    assert origin(host="det.example.com", scheme="https") == f"https://{JOB}.det.example.com:8081"
    assert origin(proxy_url="https://*.tasks.example.com") == f"https://{JOB}.tasks.example.com"
    assert origin(proxy_url="https://tasks.example.com:8443") == f"https://{JOB}.tasks.example.com:8443"
    with pytest.raises(NoProxyHost, match="proxy_url"):
        origin(host="10.1.2.3:8080")  # a bare IP has no subdomains: the admin must name a wildcard host
    with pytest.raises(NoProxyHost, match="proxy_port"):
        task_origin(JOB, proxy_url="", scheme="http", host_header="det.example.com", proxy_port=None)


def test_a_task_is_served_only_on_its_own_host():
    assert serves(JOB, f"{JOB}.localhost:8081", proxy_url="")
    assert serves(JOB, f"{JOB.upper()}.det.example.com", proxy_url="")  # hosts are case-insensitive
    for wrong in ("127.0.0.1:8081", "localhost:8081", "other-task.localhost:8081", f"{JOB}:8081",
                  f"x.{JOB}.localhost", "", None):
        assert not serves(JOB, wrong, proxy_url=""), wrong
    wildcard = "https://*.tasks.example.com"
    assert serves(JOB, f"{JOB}.tasks.example.com", proxy_url=wildcard)
    assert not serves(JOB, f"{JOB}.evil.example", proxy_url=wildcard)
    assert not serves(JOB, "other.tasks.example.com", proxy_url=wildcard)


def test_proxy_url_must_name_a_wildcard_able_dns_host_naming_the_field(tmp_path):
    assert proxy_url_problem("") is None and proxy_url_problem("https://*.tasks.example.com:8443") is None
    for bad, why in (("ftp://x.example.com", "http:// or https://"), ("https://*x.example.com", "first label"),
                     ("https://a.*.example.com", "first label"), ("https://10.0.0.1:8081", "DNS host"),
                     ("https://*.10.0.0.1", "DNS host"), ("https://x.example.com/tasks", "no path")):
        problem = proxy_url_problem(bad)
        assert problem is not None and why in problem, (bad, problem)
    config = tmp_path / "master.yaml"
    config.write_text("port: 8080\nproxy_url: https://10.0.0.1:8081\n")
    with pytest.raises(ConfigError, match="proxy_url") as e:
        load_settings(config)
    assert "*.tasks.example.com" in str(e.value)
