"""`det deploy aws` end to end without the Pulumi engine: bake, deploy, autoscale, down.

moto (server mode) stands for the AWS account and the boot simulator for the machines:

1. `det agent-image bake aws` runs against moto with a local SSH server as the builder, whose temp
   install root becomes "the image": its det-image-boot.sh is what every instance boots through.
2. The AWS program runs under the dry run's mocks with that image. What `pulumi up` would create and
   the master or its agents use (VPC, subnets, security groups, instance profiles, the bucket) is
   made in moto, and the mock ids in the master's rendered user data become moto's, as the engine's
   real outputs would; the master instance is then launched with that user data, as Pulumi does.
3. The simulator boots it through the image's boot script (IMDSv2 user data): the rendered master
   boot script writes master.yaml and becomes a real det-master with the deployed pool (only the
   database, config dir and binaries are local ones, through the script's DET_MASTER_* overrides).
4. An experiment in the deployed pool makes that master launch an agent from the baked image with
   the deployment's tags; it boots the same way, registers, and the trials complete.
5. `down`'s cleanup (infra/teardown/aws.py) stops the master and terminates the agent: nothing
   tagged with the deployment runs in moto, and the machines' processes are gone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests

from agent_image.bake import aws as bake_aws
from controlplane.master.settings import load_settings
from infra.dry_run import PlannedResource, preview_with_outputs
from infra.master_config import POOL
from infra.options import TAG_DEPLOYMENT, TAG_ROLE, AwsOptions
from infra.teardown.aws import teardown
from tests.agent_image.bake.builder_rig import BuilderSshServer
from tests.agent_image.bake.conftest import FAST
from tests.e2e import test_cloud_autoscaling as cloud
from tests.e2e.conftest import processes_mentioning
from tests.e2e.test_cloud_autoscaling import AWS_ENV, HELLO, REGION, Api, hello_config, wait_experiment
from tests.support.boot_simulator import BIN, BootSimulator, SimInstance
from tests.support.cluster import free_port_run, wait_for

pytestmark = pytest.mark.e2e

# The cloud autoscaling tests' fixtures: moto per module (reset per test), its EC2 client, the stop list.
moto_server, moto_url, ec2, stack = cloud.moto_server, cloud.moto_url, cloud.ec2, cloud.stack

CLUSTER = "e2e-deploy"
AGENT_TYPE = "t3.micro"


# -- what `pulumi up` would have created ------------------------------------------------------------


def _of_type(plan: list[PlannedResource], typ: str) -> list[PlannedResource]:
    return [r for r in plan if r.type == typ]


def _one(plan: list[PlannedResource], typ: str) -> PlannedResource:
    [found] = _of_type(plan, typ)
    return found


def create_in_moto(plan: list[PlannedResource], moto_url: str) -> dict[str, str]:
    """The planned resources the master and its agents use, made in moto; returns mock id -> moto id.
    (Instance profiles and the bucket keep their planned names, so their ARNs are the same.)"""
    import boto3

    session = boto3.session.Session(region_name=REGION)
    ec2, iam, s3 = (session.client(s, endpoint_url=moto_url) for s in ("ec2", "iam", "s3"))
    real: dict[str, str] = {}
    vpc = _one(plan, "aws:ec2/vpc:Vpc")
    real[vpc.id] = ec2.create_vpc(CidrBlock=vpc.inputs["cidrBlock"])["Vpc"]["VpcId"]
    for subnet in _of_type(plan, "aws:ec2/subnet:Subnet"):
        real[subnet.id] = ec2.create_subnet(
            VpcId=real[subnet.inputs["vpcId"]], CidrBlock=subnet.inputs["cidrBlock"],
            AvailabilityZone=subnet.inputs["availabilityZone"])["Subnet"]["SubnetId"]
    for group in _of_type(plan, "aws:ec2/securityGroup:SecurityGroup"):
        real[group.id] = ec2.create_security_group(GroupName=group.name, Description=group.name,
                                                   VpcId=real[group.inputs["vpcId"]])["GroupId"]
    for profile in _of_type(plan, "aws:iam/instanceProfile:InstanceProfile"):
        arn = iam.create_instance_profile(InstanceProfileName=profile.id)["InstanceProfile"]["Arn"]
        assert arn == profile.outputs["arn"], (arn, profile.outputs)
    for bucket in _of_type(plan, "aws:s3/bucket:Bucket"):
        s3.create_bucket(Bucket=bucket.id, CreateBucketConfiguration={"LocationConstraint": REGION})
    return real


def with_real_ids(text: str, real: dict[str, str]) -> str:
    for mock_id, moto_id in real.items():
        text = text.replace(mock_id, moto_id)
    return text


def launch_master(ec2: Any, master: PlannedResource, real: dict[str, str], user_data: str) -> str:
    """What Pulumi's aws.ec2.Instance does with the program's inputs."""
    meta = master.inputs["metadataOptions"]
    resp = ec2.run_instances(
        ImageId=master.inputs["ami"], InstanceType=master.inputs["instanceType"], MinCount=1, MaxCount=1,
        SubnetId=real[master.inputs["subnetId"]],
        SecurityGroupIds=[real[g] for g in master.inputs["vpcSecurityGroupIds"]],
        IamInstanceProfile={"Name": master.inputs["iamInstanceProfile"]},
        MetadataOptions={"HttpTokens": meta["httpTokens"], "HttpEndpoint": meta["httpEndpoint"],
                         "HttpPutResponseHopLimit": meta["httpPutResponseHopLimit"]},
        UserData=user_data,
        TagSpecifications=[{"ResourceType": "instance",
                            "Tags": [{"Key": k, "Value": v} for k, v in master.inputs["tags"].items()]}])
    return resp["Instances"][0]["InstanceId"]


# -- helpers -----------------------------------------------------------------------------------------


def bake_image(tmp_path: Path, moto_url: str, base_image: str) -> tuple[str, Path]:
    """The bake against moto with the stand-in builder; returns the AMI id and the image's root."""
    with BuilderSshServer(tmp_path / "builder") as builder:
        opts = bake_aws.AwsBakeOptions(base_image=base_image, region=REGION, ssh_cidr="203.0.113.7/32",
                                       endpoint_url=moto_url)
        result = bake_aws.bake(opts, emit=lambda _line: None, ssh_endpoint=lambda _i: ("127.0.0.1", builder.port),
                               client_key=builder.client_key, timeouts=FAST)
    return result.image_id, builder.root


def image_env(root: Path) -> dict[str, str]:
    """/opt/controlplane/image.env, which the image's systemd unit reads (EnvironmentFile)."""
    lines = (root / "opt/controlplane/image.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def instances(ec2: Any, **tags: str) -> list[dict[str, Any]]:
    filters = [{"Name": f"tag:{k.replace('_', '-')}", "Values": [v]} for k, v in tags.items()]
    return [i for r in ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]


def tags_of(instance: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}


def booted_through_the_image(inst: SimInstance) -> bool:
    got_user_data = ("GET", "/latest/user-data", 200) in inst.metadata.requests
    return got_user_data and "det-image-boot: running the instance's boot script" in inst.log_tail(10_000)


# -- the test ----------------------------------------------------------------------------------------


@pytest.mark.timeout(400)
def test_deploy_aws_master_autoscales_a_baked_agent_and_down_leaves_nothing(tmp_path, moto_url, ec2, stack):
    # 1. The agent image.
    base_image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    image_id, image_root = bake_image(tmp_path, moto_url, base_image)
    [image] = ec2.describe_images(ImageIds=[image_id])["Images"]
    assert image["State"] == "available" and tags_of(image)["det-agent-image"] == "true", image
    builders = instances(ec2, det_role="builder")
    assert builders and {i["State"]["Name"] for i in builders} == {"terminated"}, builders
    image_boot = image_root / "opt/controlplane/bin/det-image-boot.sh"
    assert image_boot.is_file()

    # 2. The deployment's program, under the mocks, with that image.
    port = free_port_run(2)  # the master.yaml det deploy writes has proxy_port: port + 1
    opts = AwsOptions(cluster_id=CLUSTER, region=REGION, inbound_cidr="203.0.113.0/24", agent_image_id=image_id,
                      master_port=port, max_dynamic_agents=1, gpu_agent_instance_types=(AGENT_TYPE,),
                      master_instance_type="t3.small", db="local")
    plan = preview_with_outputs("aws", opts).resources
    master_plan = _one(plan, "aws:ec2/instance:Instance")
    assert master_plan.inputs["ami"] == image_id and "userData" in master_plan.secrets
    assert master_plan.inputs["tags"][TAG_DEPLOYMENT] == CLUSTER and master_plan.inputs["tags"][TAG_ROLE] == "master"
    real = create_in_moto(plan, moto_url)
    user_data = with_real_ids(master_plan.inputs["userData"], real)

    # 3. The master instance, booted through the image, becomes det-master with the deployed config.
    config_dir = tmp_path / "master-etc"
    env = {**AWS_ENV, **image_env(image_root), "AWS_ENDPOINT_URL": moto_url,
           "DET_MASTER_BIN": str(BIN / "det-master"), "DET_MASTER_CONFIG_DIR": str(config_dir),
           "DET_MASTER_DATA_DIR": str(tmp_path / "master-data"),
           "DET_MASTER_DB_URL": f"sqlite:///{tmp_path}/master.db",
           "DET_MASTER_HOST": "127.0.0.1"}  # the deployed 0.0.0.0, on loopback here
    sim = BootSimulator.ec2(moto_url, tmp_path / "sim", region=REGION, cluster_id=CLUSTER, tag_key=TAG_DEPLOYMENT,
                            image_boot=image_boot, env=env, agent_args=["--slots", "1", "--slot-type", "cpu"])
    stack.append(sim.start())
    master_id = launch_master(ec2, master_plan, real, user_data)
    url = f"http://127.0.0.1:{port}"

    def master_log() -> str:
        inst = sim.instances.get(master_id)
        return inst.log_tail(60) if inst else "(the master instance has not booted)"

    def why() -> str:
        try:
            pool = json.dumps(Api(url).pool(POOL), indent=1)[:3000]
        except Exception as e:  # noqa: BLE001
            pool = f"(autoscaler describe failed: {e})"
        return f"master boot log:\n{master_log()}\n\nsimulator:\n{sim.describe()}\n\npool:\n{pool}"

    def master_up() -> bool:
        inst = sim.instances.get(master_id)
        if inst is not None and not inst.running:
            raise AssertionError(f"the master instance's boot ended (exit {inst.proc.poll()}):\n{why()}")
        try:
            return requests.get(f"{url}/info", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_for(master_up, 90, "the deployed master to answer /info", interval_s=0.5)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{why()}") from None
    assert booted_through_the_image(sim.instances[master_id]), why()

    settings = load_settings(config_dir / "master.yaml")
    [pool] = settings.pools
    provider = pool.provider
    [agent_sg_plan] = [r for r in plan if r.name == f"{CLUSTER}-agent-sg"]
    agent_sg = real[agent_sg_plan.id]
    subnets = {s.inputs["availabilityZone"]: real[s.id] for s in _of_type(plan, "aws:ec2/subnet:Subnet")}
    assert pool.name == POOL and provider["type"] == "aws" and provider["region"] == REGION
    assert provider["image_id"] == image_id and provider["instance_type"] == AGENT_TYPE
    assert provider["zone_subnets"] == subnets and provider["security_group_ids"] == [agent_sg]
    assert provider["extra_tags"][TAG_DEPLOYMENT] == CLUSTER and provider["max_instances"] == 1
    [agent_profile] = [r for r in plan if r.name == f"{CLUSTER}-agent-profile"]
    assert provider["iam_instance_profile"] == agent_profile.outputs["arn"]
    assert "endpoint_url" not in provider  # the master reaches "EC2" the way it would in AWS
    assert settings.public_url == url  # from the instance's metadata (local-ipv4)
    assert settings.checkpoint_storage["type"] == "s3"

    api = Api(url)
    [listed] = [p for p in api.get("/api/v1/resource-pools")["resourcePools"] if p["name"] == POOL]
    assert listed["provider"] == "aws" and listed["imageId"] == image_id, listed

    # 4. An experiment in the deployed pool: the master launches an agent from the baked image.
    exp_id = api.create_experiment(hello_config(), {"README": b"det deploy aws e2e\n"})
    try:
        [agent] = wait_for(lambda: instances(ec2, det_deployment=CLUSTER, det_role="agent") or None, 60,
                           "the master to launch an agent instance")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{why()}") from None
    wait_experiment(api, exp_id, 180, why)
    trials = api.trials(exp_id)
    assert len(trials) == 2 and all(t["state"] == "STATE_COMPLETED" for t in trials), trials
    assert all(HELLO in api.trial_logs(t["id"]) for t in trials), why()

    agent_id = agent["InstanceId"]
    assert agent["ImageId"] == image_id and agent["InstanceType"] == AGENT_TYPE
    assert tags_of(agent)[TAG_DEPLOYMENT] == CLUSTER, tags_of(agent)
    assert agent["SubnetId"] in subnets.values() and [g["GroupId"] for g in agent["SecurityGroups"]] == [agent_sg]
    assert agent["MetadataOptions"]["HttpTokens"] == "required"
    assert agent["IamInstanceProfile"]["Arn"] == provider["iam_instance_profile"], agent.get("IamInstanceProfile")
    assert agent_id in {a["id"] for a in api.agents(connected_only=False)}  # the agent is its instance
    assert set(sim.instances) == {master_id, agent_id}, sim.describe()
    assert booted_through_the_image(sim.instances[agent_id]), why()

    # 5. down's cleanup: the master stopped, the agent terminated, their processes gone.
    lines: list[str] = []
    report = teardown(ec2, CLUSTER, say=lines.append, timeout_s=60, poll_s=0.5)
    assert report.master_stopped == [master_id] and report.terminated == [agent_id], (report, lines)
    assert report.still_running == [], lines
    live = [i["InstanceId"] for i in instances(ec2, det_deployment=CLUSTER)
            if i["State"]["Name"] in ("pending", "running")]
    assert live == [], live
    states = {i["InstanceId"]: i["State"]["Name"] for i in instances(ec2, det_deployment=CLUSTER)}
    assert states == {master_id: "stopped", agent_id: "terminated"}, states
    try:
        wait_for(lambda: not sim.live(), 30, "the simulator to take the machines' processes away")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{sim.describe()}") from None
    for iid in (master_id, agent_id):
        assert processes_mentioning(str(tmp_path / "sim" / iid)) == [], iid
    assert sim.errors == []
