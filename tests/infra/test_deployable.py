"""The rules AWS enforces at deploy or run time and moto does not: checked on template.yaml itself.

Each test evaluates the template's intrinsics (Ref, Sub, Select, Split, Join, If, Equals, Not) for
the parameter values that matter, with a small evaluator below, as CloudFormation would.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from dropscan.local.deploy import project_root, translate

ACCOUNT, REGION = "123456789012", "eu-west-1"
#: new accounts may not configure more (Lambda's "MemorySize" quota starts at 3,008 MB)
NEW_ACCOUNT_MEMORY_MB = 3008
#: AWS: a source queue's visibility timeout at least six times its function's timeout
VISIBILITY_FACTOR = 6
#: the last part of a stack id, which CloudFormation makes (lower-case hex)
STACK_UUID = "3f2b1c4e-9a0d-11ef-8c1a-0a1b2c3d4e5f"


@pytest.fixture(scope="module")
def sam() -> dict[str, Any]:
    data: dict[str, Any] = yaml_parse((project_root() / "template.yaml").read_text())
    return data


@pytest.fixture(scope="module")
def cfn() -> dict[str, Any]:
    """The template after SAM's transform (event source mappings, layers and functions as AWS sees them)."""
    template: dict[str, Any] = translate(project_root()).template
    return template


def defaults(sam: dict[str, Any]) -> dict[str, Any]:
    return {name: p.get("Default") for name, p in sam["Parameters"].items()}


class Intrinsics:
    """CloudFormation's resolution of the intrinsics the template uses, for given parameter values."""

    def __init__(self, params: dict[str, Any], conditions: dict[str, Any], stack_name: str) -> None:
        stack_id = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{stack_name}/{STACK_UUID}"
        self.refs = {
            **params,
            "AWS::StackName": stack_name,
            "AWS::StackId": stack_id,
            "AWS::AccountId": ACCOUNT,
            "AWS::Region": REGION,
            "AWS::Partition": "aws",
        }
        self.conditions = conditions
        self.functions = {
            "Ref": lambda a: self.refs.get(a, f"<{a}>"),
            "Fn::GetAtt": lambda a: f"<{a[0]}.{a[1]}>",
            "Fn::Sub": self.sub,
            "Fn::Select": lambda a: self(a[1])[int(a[0])],
            "Fn::Split": lambda a: str(self(a[1])).split(a[0]),
            "Fn::Join": lambda a: a[0].join(str(x) for x in self(a[1])),
            "Fn::If": lambda a: self(a[1] if self.condition(a[0]) else a[2]),
            "Fn::Equals": lambda a: str(self(a[0])) == str(self(a[1])),
            "Fn::Not": lambda a: not self(a[0]),
            "Condition": self.condition,
        }

    def __call__(self, expr: Any) -> Any:
        if isinstance(expr, list):
            return [self(x) for x in expr]
        if isinstance(expr, dict) and len(expr) == 1 and next(iter(expr)) in self.functions:
            [(fn, arg)] = expr.items()
            return self.functions[fn](arg)
        return expr

    def condition(self, name: str) -> bool:
        return bool(self(self.conditions[name]))

    def sub(self, arg: Any) -> str:
        text, names = (arg, {}) if isinstance(arg, str) else (arg[0], {k: self(v) for k, v in arg[1].items()})

        def one(m: re.Match[str]) -> str:
            key = m.group(1)
            if key in names:
                return str(names[key])
            if "." in key:
                return str(self({"Fn::GetAtt": key.split(".", 1)}))
            return str(self({"Ref": key}))

        return re.sub(r"\$\{([A-Za-z0-9:.]+)\}", one, text)


def evaluate(expr: Any, params: dict[str, Any], stack_name: str = "dropscan") -> Any:
    """``expr`` as CloudFormation resolves it for ``params``; ``<X.Attr>`` for attributes of resources."""
    conditions = params.get("__conditions__", {})
    return Intrinsics(params, conditions, stack_name)(expr)


def with_conditions(sam: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    return {**defaults(sam), **overrides, "__conditions__": sam["Conditions"]}


# ---------------------------------------------------------------- queues and timeouts
def test_every_visibility_timeout_is_six_times_its_consumers_timeout(
    sam: dict[str, Any], cfn: dict[str, Any]
) -> None:
    params = defaults(sam)
    resources = cfn["Resources"]
    checked = []
    for m in (r for r in resources.values() if r["Type"] == "AWS::Lambda::EventSourceMapping"):
        queue = m["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]
        function = m["Properties"]["FunctionName"]["Ref"]
        visibility = int(evaluate(resources[queue]["Properties"]["VisibilityTimeout"], params))
        timeout = int(evaluate(resources[function]["Properties"]["Timeout"], params))
        assert visibility >= VISIBILITY_FACTOR * timeout, (queue, function, visibility, timeout)
        checked.append(queue)
    assert len(set(checked)) == 7  # every consumed queue


def test_the_longest_function_timeout_allowed_still_fits_the_default_visibility(sam: dict[str, Any]) -> None:
    longest = int(sam["Parameters"]["FunctionTimeout"]["MaxValue"])
    assert int(sam["Parameters"]["QueueVisibilityTimeout"]["Default"]) >= VISIBILITY_FACTOR * longest


# ---------------------------------------------------------------- architectures and packaging
def functions_of(sam: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: r for n, r in sam["Resources"].items() if r["Type"] == "AWS::Serverless::Function"}


def architectures(sam: dict[str, Any], function: dict[str, Any]) -> list[str]:
    found: list[str] = function["Properties"].get("Architectures") or sam["Globals"]["Function"].get(
        "Architectures", ["x86_64"]
    )
    return found


def test_each_layer_is_built_for_the_architecture_of_every_function_using_it(sam: dict[str, Any]) -> None:
    layers = {n: r for n, r in sam["Resources"].items() if r["Type"] == "AWS::Serverless::LayerVersion"}
    assert layers
    users: dict[str, set[str]] = {n: set() for n in layers}
    for function in functions_of(sam).values():
        for layer in function["Properties"].get("Layers", []):
            users[layer["Ref"]].update(architectures(sam, function))
    for name, layer in layers.items():
        # without BuildArchitecture, sam build installs x86_64 wheels whatever the functions run on
        built = layer["Metadata"]["BuildArchitecture"]
        assert users[name] == {built}, (name, built, users[name])
        assert layer["Properties"]["CompatibleArchitectures"] == [built]


def test_image_functions_declare_their_architecture_and_take_no_runtime_or_layers(
    sam: dict[str, Any],
) -> None:
    assert not {"Layers", "Runtime", "Handler"} & set(sam["Globals"]["Function"])  # cfn-lint E3685
    images = {n: f for n, f in functions_of(sam).items() if f["Properties"].get("PackageType") == "Image"}
    assert set(images) == {"TriageImageFunction", "FirmwareImageFunction"}
    for function in images.values():
        props = function["Properties"]
        assert not {"Layers", "Runtime", "Handler", "CodeUri"} & set(props)
        assert props["Architectures"] == ["x86_64"]  # ScanCode's native wheels are x86_64 only
        # sam package uploads an image it has built and passes a private ECR name through: a build
        # without the image (TriageDetector=tags) needs the latter, or sam deploy stops ("Image not found")
        uri = evaluate(props["ImageUri"], {"AWS::URLSuffix": "amazonaws.com"})
        assert re.fullmatch(rf"{ACCOUNT}\.dkr\.ecr\.{REGION}\.amazonaws\.com/[a-z0-9-]+:[a-z0-9-]+", uri), uri
        assert function["Metadata"]["DockerContext"]  # with it, sam build builds the image all the same
        dockerfile = (
            project_root() / function["Metadata"]["DockerContext"] / function["Metadata"]["Dockerfile"]
        )
        assert dockerfile.is_file()


def test_every_zip_function_runs_python_3_11_with_the_shared_layer(sam: dict[str, Any]) -> None:
    zips = {n: f for n, f in functions_of(sam).items() if f["Properties"].get("PackageType") != "Image"}
    assert len(zips) == 9  # the eight stages and the review desk
    for name, function in zips.items():
        assert function["Properties"]["Runtime"] == "python3.11", name
        assert function["Properties"]["Layers"] == [{"Ref": "SharedLayer"}], name
        assert Path(project_root() / function["Properties"]["CodeUri"] / "app.py").is_file()


@pytest.mark.parametrize(
    ("detector", "deployed"),
    [("scancode", "TriageImageFunction"), ("tags", "TriageFunction"), ("auto", "TriageFunction")],
)
def test_exactly_one_triage_function_is_deployed_for_each_detector(
    sam: dict[str, Any], detector: str, deployed: str
) -> None:
    params = with_conditions(sam, TriageDetector=detector)
    triage = [
        n
        for n, f in functions_of(sam).items()
        if n.startswith("Triage") and evaluate({"Condition": f["Condition"]}, params)
    ]
    assert triage == [deployed]


@pytest.mark.parametrize(
    ("package", "deployed"), [("image", "FirmwareImageFunction"), ("zip", "FirmwareFunction")]
)
def test_exactly_one_firmware_function_is_deployed_for_each_package(
    sam: dict[str, Any], package: str, deployed: str
) -> None:
    params = with_conditions(sam, FirmwarePackage=package)
    firmware = [
        n
        for n, f in functions_of(sam).items()
        if n.startswith("Firmware") and evaluate({"Condition": f["Condition"]}, params)
    ]
    assert firmware == [deployed]


def test_the_layer_brings_boto3_so_that_boto3_botocore_and_s3transfer_are_one_set() -> None:
    # pynamodb brings botocore; without boto3 beside it the runtime's own boto3 and s3transfer would run
    # on the layer's botocore. The packaging test checks the built layer's versions agree.
    lines = (project_root() / "shared" / "requirements.txt").read_text().splitlines()
    names = {
        re.split(r"[<>=!~\[ ]", line, maxsplit=1)[0].lower() for line in lines if line and line[0] != "#"
    }
    assert {"boto3", "archi"} <= names


# ---------------------------------------------------------------- quotas of a new account
def test_memory_defaults_fit_a_new_account(sam: dict[str, Any]) -> None:
    params = defaults(sam)
    default_memory = sam["Globals"]["Function"]["MemorySize"]
    for name, function in functions_of(sam).items():
        memory = int(evaluate(function["Properties"].get("MemorySize", default_memory), params))
        assert memory <= NEW_ACCOUNT_MEMORY_MB, (name, memory)
    assert int(params["UnpackReservedConcurrency"]) == 0  # new accounts have 10 in all, none to reserve


# ---------------------------------------------------------------- names
def valid_bucket_name(name: str) -> bool:
    """S3's rules for general purpose buckets."""
    return (
        3 <= len(name) <= 63
        and re.fullmatch(r"[a-z0-9][a-z0-9.-]*[a-z0-9]", name) is not None
        and ".." not in name
        and not re.fullmatch(r"\d+\.\d+\.\d+\.\d+", name)
        and not name.startswith(("xn--", "sthree-", "amzn-s3-demo-"))
        and not name.endswith(("-s3alias", "--ol-s3", ".mrap", "--x-s3"))
    )


#: stack names CloudFormation accepts ([a-zA-Z][-a-zA-Z0-9]*, up to 128 characters)
STACK_NAMES = ["d", "dropscan", "DropScan-Prod", "A" * 128, "a-" * 63 + "zz", "x1-" + "Q" * 125]


@pytest.mark.parametrize("stack_name", STACK_NAMES, ids=lambda n: f"{n[:12]}..{len(n)}")
def test_bucket_names_are_valid_for_any_allowed_stack_name(sam: dict[str, Any], stack_name: str) -> None:
    assert re.fullmatch(r"[a-zA-Z][-a-zA-Z0-9]{0,127}", stack_name)
    params = defaults(sam)
    resources = sam["Resources"]
    buckets = {n: r for n, r in resources.items() if r["Type"] == "AWS::S3::Bucket"}
    names = {n: evaluate(b["Properties"]["BucketName"], params, stack_name) for n, b in buckets.items()}
    for logical, name in names.items():
        assert valid_bucket_name(name), (logical, name)
    assert len(set(names.values())) == len(names)
    # each queue policy names its bucket as S3 will: the same expression, evaluated alike
    for policy in (r for r in resources.values() if r["Type"] == "AWS::SQS::QueuePolicy"):
        [stmt] = policy["Properties"]["PolicyDocument"]["Statement"]
        source = evaluate(stmt["Condition"]["ArnEquals"]["aws:SourceArn"], params, stack_name)
        assert source.removeprefix("arn:aws:s3:::") in names.values(), source


def test_the_functions_are_told_the_bucket_names_the_buckets_get(sam: dict[str, Any]) -> None:
    env = sam["Globals"]["Function"]["Environment"]["Variables"]
    assert (env["DROPS_BUCKET"], env["RESULTS_BUCKET"], env["UPSTREAM_BUCKET"]) == (
        {"Ref": "DropsBucket"},
        {"Ref": "ResultsBucket"},
        {"Ref": "UpstreamBucket"},
    )


# ---------------------------------------------------------------- data outlives the stack
def test_data_holding_tables_and_buckets_are_retained(sam: dict[str, Any]) -> None:
    holding = {"UpstreamTable", "ScansTable", "DecisionsTable"}
    holding |= {"DropsBucket", "ResultsBucket", "UpstreamBucket"}
    stores = {
        n for n, r in sam["Resources"].items() if r["Type"] in ("AWS::S3::Bucket", "AWS::DynamoDB::Table")
    }
    assert holding | {"IdempotencyTable"} == stores  # idempotency records expire within hours: dropped
    for name in holding:
        resource = sam["Resources"][name]
        assert (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")) == (
            "Retain",
            "Retain",
        ), name


# ---------------------------------------------------------------- who hears of an audit
@pytest.mark.parametrize("email", ["", "audit@example.com"])
def test_an_output_says_whether_anyone_is_subscribed(sam: dict[str, Any], email: str) -> None:
    params = with_conditions(sam, NotifyEmail=email)
    said = evaluate(sam["Outputs"]["NotificationSubscription"]["Value"], params)
    if email:
        assert said.startswith(email) and "confirm" in said
    else:
        assert said.startswith("NOBODY") and "aws sns subscribe --topic-arn <NotificationTopic>" in said
    pattern = sam["Parameters"]["NotifyEmail"]["AllowedPattern"]
    assert re.fullmatch(pattern, email)
    assert not re.fullmatch(pattern, "not an address")
