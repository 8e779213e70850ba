"""The GCP program under Pulumi's mocks (through the dry run's recorder): network, firewall rules
that admit only --inbound-cidr from outside, service accounts with roles bound as narrowly as GCP
allows, a private bucket, a Shielded master whose startup script is a secret, Cloud SQL or local."""

from __future__ import annotations

import pytest

from controlplane.master.autoscaling.providers import provisioner_for
from controlplane.master.autoscaling.service import scaling_of
from controlplane.master.settings import load_settings
from infra.dry_run import PLACEHOLDER_SECRETS, preview_with_outputs
from infra.options import TAG_DEPLOYMENT, TAG_ROLE, GcpOptions
from tests.infra.conftest import is_secret, of_type, one

CIDR = "203.0.113.0/24"
FIREWALL = "gcp:compute/firewall:Firewall"
INSTANCE = "gcp:compute/instance:Instance"
SQL = "gcp:sql/databaseInstance:DatabaseInstance"
PROJECT_IAM = "gcp:projects/iAMMember:IAMMember"
BUCKET_IAM = "gcp:storage/bucketIAMMember:BucketIAMMember"
SA_IAM = "gcp:serviceaccount/iAMMember:IAMMember"


def _opts(**kw) -> GcpOptions:
    return GcpOptions(cluster_id="demo", project_id="proj-1", region="us-central1", zone="us-central1-a",
                      inbound_cidr=CIDR, **kw)


@pytest.fixture(scope="module")
def local():
    return preview_with_outputs("gcp", _opts(max_dynamic_agents=4))


@pytest.fixture(scope="module")
def cloudsql():
    return preview_with_outputs("gcp", _opts(db="cloudsql", allow_ssh=True, spot=True, gpus_per_agent=2,
                                             gpu_agent_machine_types=("n1-standard-8", "g2-standard-8"),
                                             agent_image="projects/proj-1/global/images/det-agent-7",
                                             labels={"team": "ml"}))


def _email(plan, name: str) -> str:
    return one(plan.resources, "gcp:serviceaccount/account:Account", name).outputs["email"]


def test_every_resource_the_issue_names_is_planned(cloudsql):
    types = {r.type for r in cloudsql.resources}
    for wanted in ("gcp:compute/network:Network", "gcp:compute/subnetwork:Subnetwork", FIREWALL,
                   "gcp:serviceaccount/account:Account", PROJECT_IAM, SA_IAM, BUCKET_IAM, "gcp:storage/bucket:Bucket",
                   INSTANCE, "gcp:compute/address:Address", SQL, "gcp:sql/user:User",
                   "gcp:compute/routerNat:RouterNat"):
        assert wanted in types, wanted


def test_only_the_inbound_cidr_reaches_the_master_from_outside(local, cloudsql):
    # The API and web UI, the task proxy next to it (another origin: notebooks' pages), SSH when asked.
    for plan, ports in ((local, {"8080", "8081"}), (cloudsql, {"8080", "8081", "22"})):
        master_sa = _email(plan, "demo-master-sa")
        rules = of_type(plan.resources, FIREWALL)
        assert all(r.inputs["direction"] == "INGRESS" for r in rules)
        from_outside = [r for r in rules if r.inputs.get("sourceRanges")]
        assert {cidr for r in from_outside for cidr in r.inputs["sourceRanges"]} == {CIDR}
        assert {p for r in from_outside for a in r.inputs["allows"] for p in a["ports"]} == ports
        assert all(r.inputs["targetServiceAccounts"] == [master_sa] for r in from_outside)
        # Every other rule is between the deployment's own service accounts.
        for r in rules:
            assert r.inputs.get("sourceRanges") or r.inputs.get("sourceServiceAccounts"), r.name
            assert "0.0.0.0/0" not in (r.inputs.get("sourceRanges") or [])


def test_ssh_only_when_asked(local):
    ports = {p for r in of_type(local.resources, FIREWALL) for a in r.inputs["allows"] for p in a.get("ports", [])}
    assert "22" not in ports


def test_agents_are_reached_only_by_the_master_and_each_other(local):
    agent_sa, master_sa = _email(local, "demo-agent-sa"), _email(local, "demo-master-sa")
    to_agents = [r for r in of_type(local.resources, FIREWALL) if r.inputs["targetServiceAccounts"] == [agent_sa]]
    assert sorted(s for r in to_agents for s in r.inputs["sourceServiceAccounts"]) == sorted([agent_sa, master_sa])
    assert all(not r.inputs.get("sourceRanges") for r in to_agents)


def test_master_roles_are_bound_narrowly(local):
    master_member = f"serviceAccount:{_email(local, 'demo-master-sa')}"
    agent_member = f"serviceAccount:{_email(local, 'demo-agent-sa')}"
    (admin,) = of_type(local.resources, PROJECT_IAM)  # the only project-wide grant
    assert (admin.inputs["role"], admin.inputs["member"]) == ("roles/compute.instanceAdmin.v1", master_member)
    expression = admin.inputs["condition"]["expression"]
    assert 'resource.name.startsWith("projects/proj-1/zones/us-central1-a/instances/det-gpu")' in expression
    assert '!resource.name.endsWith("/instances/demo-master")' in expression
    (acts_as,) = of_type(local.resources, SA_IAM)
    assert acts_as.inputs["role"] == "roles/iam.serviceAccountUser" and acts_as.inputs["member"] == master_member
    assert acts_as.inputs["serviceAccountId"] == one(local.resources, "gcp:serviceaccount/account:Account",
                                                     "demo-agent-sa").outputs["name"]
    bucket = local.outputs["bucket"]
    grants = {(r.inputs["member"], r.inputs["role"], r.inputs["bucket"]) for r in of_type(local.resources, BUCKET_IAM)}
    assert grants == {(master_member, "roles/storage.objectAdmin", bucket),
                      (agent_member, "roles/storage.objectUser", bucket)}


def test_bucket_is_private(local):
    bucket = one(local.resources, "gcp:storage/bucket:Bucket")
    assert bucket.inputs["uniformBucketLevelAccess"] is True
    assert bucket.inputs["publicAccessPrevention"] == "enforced"
    assert bucket.inputs["forceDestroy"] is False
    assert bucket.inputs["labels"][TAG_DEPLOYMENT] == "demo"


def test_master_is_shielded_with_a_secret_startup_script(local):
    master = one(local.resources, INSTANCE)
    shielded = master.inputs["shieldedInstanceConfig"]
    assert shielded["enableSecureBoot"] and shielded["enableVtpm"] and shielded["enableIntegrityMonitoring"]
    assert master.inputs["serviceAccount"] == {"email": _email(local, "demo-master-sa"),
                                               "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}
    assert is_secret(master, "metadata.startup-script")
    assert master.inputs["metadata"]["block-project-ssh-keys"] == "TRUE"
    assert master.inputs["labels"] == {TAG_DEPLOYMENT: "demo", TAG_ROLE: "master"}
    assert master.inputs["bootDisk"]["initializeParams"]["image"] == "projects/proj-1/global/images/family/det-agent"


def test_cloudsql_is_private_and_protected(cloudsql, local):
    db = one(cloudsql.resources, SQL)
    ip = db.inputs["settings"]["ipConfiguration"]
    assert ip["ipv4Enabled"] is False and ip["privateNetwork"] and ip["sslMode"] == "ENCRYPTED_ONLY"
    assert db.inputs["deletionProtection"] is True and db.inputs["settings"]["deletionProtectionEnabled"] is True
    assert is_secret(one(cloudsql.resources, "gcp:sql/user:User"), "password")
    assert not of_type(local.resources, SQL)


def test_labels_carry_the_deployment_and_user_labels(cloudsql):
    labelled = [r for r in cloudsql.resources if "labels" in r.inputs]
    assert len(labelled) >= 3
    for r in labelled:
        assert r.inputs["labels"][TAG_DEPLOYMENT] == "demo" and r.inputs["labels"]["team"] == "ml", r.name


def test_outputs(cloudsql):
    assert cloudsql.outputs["master_url"] == "http://198.51.100.10:8080"
    assert cloudsql.outputs["agent_image"] == "projects/proj-1/global/images/det-agent-7"
    assert cloudsql.outputs["bucket"].startswith("demo-ckpt-")


@pytest.mark.parametrize("variant", ["local", "cloudsql"])
def test_startup_script_boots_a_master_with_this_projects_pools(variant, request, run_boot):
    plan = request.getfixturevalue(variant)
    master = one(plan.resources, INSTANCE)
    env = {"DET_MASTER_PUBLIC_URL": "http://10.10.0.2:8080"}
    if variant == "local":
        env["DET_MASTER_DB_URL"] = "sqlite:////tmp/unused.db"
    booted = run_boot(master.inputs["metadata"]["startup-script"], **env)
    assert booted.rc == 0, booted.output
    settings = load_settings(booted.config_path)
    assert settings.join_token == PLACEHOLDER_SECRETS["joinToken"]
    assert settings.checkpoint_storage == {"type": "gcs", "bucket": plan.outputs["bucket"]}
    network = one(plan.resources, "gcp:compute/network:Network").id
    subnetwork = one(plan.resources, "gcp:compute/subnetwork:Subnetwork").id
    for pool in settings.pools:
        p = pool.provider
        assert (p["type"], p["project"], p["zones"]) == ("gcp", "proj-1", ["us-central1-a"])
        assert (p["network"], p["subnetwork"]) == (network, subnetwork)
        assert p["service_account"] == _email(plan, "demo-agent-sa")
        assert p["labels"][TAG_DEPLOYMENT] == "demo"
        assert type(provisioner_for(pool)).__name__ == "GceProvisioner"
    if variant == "local":
        (pool,) = settings.pools
        assert settings.db_url == "sqlite:////tmp/unused.db"
        assert scaling_of(pool).max_instances == 4 and not scaling_of(pool).spot
        assert pool.provider["gpu_count"] == 1
    else:
        assert [p.name for p in settings.pools] == ["gpu", "gpu-g2-standard-8"]
        assert [p.provider["machine_type"] for p in settings.pools] == ["n1-standard-8", "g2-standard-8"]
        assert all(scaling_of(p).spot and scaling_of(p).slots_per_instance == 2 for p in settings.pools)
        assert settings.db_url.startswith(f"postgresql://determined:{PLACEHOLDER_SECRETS['dbPassword']}@10.20.0.3:")


def test_only_down_with_delete_database_switches_the_cloudsql_protection_off():
    opts = GcpOptions(cluster_id="demo", project_id="proj", region="us-central1", zone="us-central1-a",
                      inbound_cidr="203.0.113.0/24", db="cloudsql")
    plan = preview_with_outputs("gcp", opts, config={"dbDeletionProtection": "false"})
    db = one(plan.resources, SQL)
    assert db.inputs["deletionProtection"] is False and db.inputs["settings"]["deletionProtectionEnabled"] is False
