"""The AWS program under Pulumi's mocks (through the dry run's recorder): every resource of a
deployment and the settings that keep it closed — only --inbound-cidr reaches the master, IMDSv2,
encryption, public access blocked, least-privilege IAM — and the master.yaml its user data writes."""

from __future__ import annotations

import ipaddress

import pytest

from controlplane.master.autoscaling.providers import provisioner_for
from controlplane.master.autoscaling.service import scaling_of
from controlplane.master.settings import load_settings
from infra.dry_run import PLACEHOLDER_SECRETS, preview_with_outputs
from infra.dry_run_outputs import MOCK_AMI
from infra.options import TAG_DEPLOYMENT, TAG_ROLE, AwsOptions
from tests.infra.conftest import is_secret, of_type, one, policy

CIDR = "203.0.113.0/24"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SG = "aws:ec2/securityGroup:SecurityGroup"
INSTANCE = "aws:ec2/instance:Instance"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
RDS = "aws:rds/instance:Instance"


@pytest.fixture(scope="module")
def local():
    return preview_with_outputs("aws", AwsOptions(cluster_id="demo", region="us-west-2", inbound_cidr=CIDR,
                                                  max_dynamic_agents=7))


@pytest.fixture(scope="module")
def rds():
    return preview_with_outputs("aws", AwsOptions(
        cluster_id="demo", region="us-west-2", inbound_cidr=CIDR, db="rds", keypair="ops", spot=True,
        gpu_agent_instance_types=("g5.12xlarge", "g4dn.12xlarge"), agent_image_id="ami-0baked",
        tags={"team": "ml"}))


def _sg_id(plan, name: str) -> str:
    return next(r.id for r in plan.resources if r.name == name)


def plan_names(plan) -> dict[str, str]:
    """mock id -> resource name (rules and the pool refer to groups and subnets by id)."""
    return {r.id: r.name for r in plan.resources}


def test_every_resource_the_issue_names_is_planned(rds):
    types = {r.type for r in rds.resources}
    for wanted in ("aws:ec2/vpc:Vpc", "aws:ec2/subnet:Subnet", "aws:ec2/internetGateway:InternetGateway", SG, INGRESS,
                   "aws:iam/role:Role", "aws:iam/instanceProfile:InstanceProfile", ROLE_POLICY, "aws:s3/bucket:Bucket",
                   "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
                   "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
                   INSTANCE, "aws:ec2/eip:Eip", RDS, "aws:rds/subnetGroup:SubnetGroup"):
        assert wanted in types, wanted
    assert len(of_type(rds.resources, "aws:ec2/subnet:Subnet")) == 2
    zones = {s.inputs["availabilityZone"] for s in of_type(rds.resources, "aws:ec2/subnet:Subnet")}
    assert len(zones) == 2  # RDS needs two zones


def test_only_the_inbound_cidr_reaches_the_master(local, rds):
    # The API and web UI, the task proxy next to it (another origin: notebooks' pages), SSH with a keypair.
    for plan, ports in ((local, {8080, 8081}), (rds, {8080, 8081, 22})):
        rules = of_type(plan.resources, INGRESS)
        cidr_rules = [r for r in rules if r.inputs.get("cidrIpv4") or r.inputs.get("cidrIpv6")]
        assert {r.inputs["cidrIpv4"] for r in cidr_rules} == {CIDR}
        assert {(r.inputs["fromPort"], r.inputs["toPort"]) for r in cidr_rules} == {(p, p) for p in ports}
        master_sg = _sg_id(plan, "demo-master-sg")
        assert {r.inputs["securityGroupId"] for r in cidr_rules} == {master_sg}
        # No inline rules on the groups, and nothing else anywhere admits the internet.
        assert all(not sg.inputs.get("ingress") for sg in of_type(plan.resources, SG))
        for r in rules:
            cidr = r.inputs.get("cidrIpv4")
            assert cidr in (None, CIDR)
            assert cidr is not None or r.inputs.get("referencedSecurityGroupId")


def test_ssh_is_open_only_with_a_keypair(local, rds):
    assert not [r for r in of_type(local.resources, INGRESS) if r.inputs.get("fromPort") == 22]
    assert one(local.resources, INSTANCE).inputs.get("keyName") is None
    ssh = [r for r in of_type(rds.resources, INGRESS) if r.inputs.get("fromPort") == 22]
    assert [(r.inputs["cidrIpv4"], r.inputs["ipProtocol"]) for r in ssh] == [(CIDR, "tcp")]
    assert one(rds.resources, INSTANCE).inputs["keyName"] == "ops"


def test_agents_admit_only_the_master_and_each_other(local):
    agent_sg, master_sg = _sg_id(local, "demo-agent-sg"), _sg_id(local, "demo-master-sg")
    to_agents = [r for r in of_type(local.resources, INGRESS) if r.inputs["securityGroupId"] == agent_sg]
    assert {r.inputs.get("referencedSecurityGroupId") for r in to_agents} == {agent_sg, master_sg}
    assert all(r.inputs.get("cidrIpv4") is None for r in to_agents)
    from_agents = [r for r in of_type(local.resources, INGRESS)
                   if r.inputs.get("referencedSecurityGroupId") == agent_sg
                   and r.inputs["securityGroupId"] == master_sg]
    assert [(r.inputs["ipProtocol"], r.inputs["fromPort"]) for r in from_agents] == [("tcp", 8080)]


def test_master_instance_requires_imdsv2_and_encrypts_its_disk(local):
    master = one(local.resources, INSTANCE)
    assert master.inputs["metadataOptions"]["httpTokens"] == "required"
    assert master.inputs["rootBlockDevice"]["encrypted"] is True
    assert master.inputs["ami"] == MOCK_AMI  # the newest baked image, looked up without --agent-image
    assert is_secret(master, "userData")
    assert master.inputs["tags"][TAG_DEPLOYMENT] == "demo" and master.inputs["tags"][TAG_ROLE] == "master"
    eip = one(local.resources, "aws:ec2/eip:Eip")
    assert eip.inputs["domain"] == "vpc" and eip.inputs["instance"]


def test_bucket_is_encrypted_private_and_tls_only(local):
    r = local.resources
    sse = one(r, "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")
    assert sse.inputs["rules"][0]["applyServerSideEncryptionByDefault"]["sseAlgorithm"] in ("aws:kms", "AES256")
    block = one(r, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    assert all(block.inputs[k] is True for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                                                 "restrictPublicBuckets"))
    bucket = one(r, "aws:s3/bucket:Bucket")
    assert bucket.inputs["forceDestroy"] is False
    deny = policy(one(r, "aws:s3/bucketPolicy:BucketPolicy"))["Statement"][0]
    assert deny["Effect"] == "Deny" and deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def _statements(plan, name: str) -> list[dict]:
    return policy(one(plan.resources, ROLE_POLICY, name))["Statement"]


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def test_master_policy_is_least_privilege(rds):
    statements = _statements(rds, "demo-master-policy")
    bucket_arn = f"arn:aws:s3:::{rds.outputs['bucket']}"
    agent_role = next(r for r in rds.resources if r.name == "demo-agent-role")
    for s in statements:
        assert s["Effect"] == "Allow"
        actions = _as_list(s["Action"])
        assert not any(a == "*" or a.endswith(":*") for a in actions), s
        if _as_list(s["Resource"]) == ["*"]:
            assert actions == ["ec2:Describe*"], s  # the one action without resource-level permissions
    by_action: dict[str, list[dict]] = {}
    for s in statements:
        for a in _as_list(s["Action"]):
            by_action.setdefault(a, []).append(s)
    for action in ("ec2:TerminateInstances", "ec2:StopInstances"):
        (s,) = by_action[action]
        assert s["Condition"] == {"StringEquals": {f"aws:ResourceTag/{TAG_DEPLOYMENT}": "demo"}}
    launch_tagged = [s for s in by_action["ec2:RunInstances"] if "Condition" in s]
    assert launch_tagged[0]["Condition"] == {"StringEquals": {f"aws:RequestTag/{TAG_DEPLOYMENT}": "demo"}}
    launch_uses = next(s for s in by_action["ec2:RunInstances"] if "Condition" not in s)
    assert "arn:aws:ec2:us-west-2::image/ami-0baked" in launch_uses["Resource"]
    assert by_action["ec2:CreateTags"][0]["Condition"] == {"StringEquals": {"ec2:CreateAction": "RunInstances"}}
    (pass_role,) = by_action["iam:PassRole"]
    assert pass_role["Resource"] == agent_role.outputs["arn"]
    s3 = [s for s in statements if any(a.startswith("s3:") for a in _as_list(s["Action"]))]
    assert {r for s in s3 for r in _as_list(s["Resource"])} == {bucket_arn, f"{bucket_arn}/*"}
    assert "iam:CreateServiceLinkedRole" in by_action  # --spot: the spot service-linked role, and only that
    assert by_action["iam:CreateServiceLinkedRole"][0]["Condition"]["StringLike"] == {
        "iam:AWSServiceName": "spot.amazonaws.com"}


def test_agent_policy_reaches_only_the_bucket(local):
    bucket_arn = f"arn:aws:s3:::{local.outputs['bucket']}"
    statements = _statements(local, "demo-agent-policy")
    assert {a for s in statements for a in _as_list(s["Action"])} <= {
        "s3:ListBucket", "s3:GetBucketLocation", "s3:GetObject", "s3:PutObject", "s3:DeleteObject",
        "s3:AbortMultipartUpload"}
    assert {r for s in statements for r in _as_list(s["Resource"])} == {bucket_arn, f"{bucket_arn}/*"}
    assert "iam:CreateServiceLinkedRole" not in str(_statements(local, "demo-master-policy"))  # no --spot


def test_rds_is_encrypted_private_and_protected(rds, local):
    db = one(rds.resources, RDS)
    assert db.inputs["engine"] == "postgres"
    assert db.inputs["storageEncrypted"] is True
    assert db.inputs["publiclyAccessible"] is False
    assert db.inputs["deletionProtection"] is True
    assert db.inputs["skipFinalSnapshot"] is False and db.inputs["finalSnapshotIdentifier"]
    assert is_secret(db, "password")
    db_sg = _sg_id(rds, "demo-database-sg")
    (rule,) = [r for r in of_type(rds.resources, INGRESS) if r.inputs["securityGroupId"] == db_sg]
    assert (rule.inputs["fromPort"], rule.inputs["referencedSecurityGroupId"]) == (5432, _sg_id(rds, "demo-master-sg"))
    assert not of_type(local.resources, RDS)


def test_every_taggable_resource_carries_the_deployment_and_user_tags(rds):
    tagged = [r for r in rds.resources if "tags" in r.inputs]
    assert len(tagged) >= 15
    for r in tagged:
        assert r.inputs["tags"][TAG_DEPLOYMENT] == "demo", r.name
        assert r.inputs["tags"]["team"] == "ml", r.name


def test_outputs(local):
    assert local.outputs["master_url"] == "http://198.51.100.10:8080"
    assert local.outputs["bucket"].startswith("demo-ckpt-")
    assert local.outputs["agent_image"] == MOCK_AMI


@pytest.mark.parametrize("variant", ["local", "rds"])
def test_user_data_boots_a_master_with_this_accounts_pool(variant, request, run_boot):
    plan = request.getfixturevalue(variant)
    master = one(plan.resources, INSTANCE)
    env = {"DET_MASTER_PUBLIC_URL": "http://10.0.0.10:8080"}
    if variant == "local":
        env["DET_MASTER_DB_URL"] = "sqlite:////tmp/unused.db"  # instead of installing PostgreSQL here
    booted = run_boot(master.inputs["userData"], **env)
    assert booted.rc == 0, booted.output
    assert (booted.config_dir / "join-token").read_text() == PLACEHOLDER_SECRETS["joinToken"]
    settings = load_settings(booted.config_path)
    assert settings.join_token == PLACEHOLDER_SECRETS["joinToken"]
    assert settings.checkpoint_storage == {"type": "s3", "bucket": plan.outputs["bucket"]}
    (pool,) = settings.pools
    p = pool.provider
    names = plan_names(plan)
    assert p["type"] == "aws" and p["region"] == "us-west-2"
    assert [names[s] for s in p["security_group_ids"]] == ["demo-agent-sg"]
    assert sorted(names[s] for s in p["zone_subnets"].values()) == ["demo-public-0", "demo-public-1"]
    assert p["iam_instance_profile"] == one(plan.resources, "aws:iam/instanceProfile:InstanceProfile",
                                            "demo-agent-profile").outputs["arn"]
    assert p["extra_tags"][TAG_DEPLOYMENT] == "demo"
    assert type(provisioner_for(pool)).__name__ == "Ec2Provisioner"  # every field is one Ec2Config knows
    scaling = scaling_of(pool)
    if variant == "local":
        assert settings.db_url == "sqlite:////tmp/unused.db"
        assert p["image_id"] == MOCK_AMI and scaling.max_instances == 7 and not scaling.spot
        assert scaling.instance_types == ("g4dn.xlarge",) and scaling.slots_per_instance == 1
    else:
        address = one(plan.resources, RDS).name
        assert settings.db_url.startswith(f"postgresql://determined:{PLACEHOLDER_SECRETS['dbPassword']}@{address}.")
        assert p["image_id"] == "ami-0baked" and scaling.spot and p["key_name"] == "ops"
        assert scaling.instance_types == ("g5.12xlarge", "g4dn.12xlarge") and scaling.slots_per_instance == 4
        assert p["extra_tags"]["team"] == "ml"


def test_vpc_and_subnets_are_private_ranges(local):
    vpc = one(local.resources, "aws:ec2/vpc:Vpc")
    assert ipaddress.ip_network(vpc.inputs["cidrBlock"]).is_private


def test_only_down_with_delete_database_switches_the_rds_protection_off():
    opts = AwsOptions(cluster_id="demo", region="us-west-2", inbound_cidr=CIDR, db="rds")
    for value, protected in (("false", False), ("true", True)):
        plan = preview_with_outputs("aws", opts, config={"dbDeletionProtection": value})
        assert one(plan.resources, RDS).inputs["deletionProtection"] is protected
