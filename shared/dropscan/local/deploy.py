"""Deploy template.yaml into moto: SAM translation, moto's CloudFormation, and what moto leaves out."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from dropscan.local import user_pool

# moto's CloudFormation imports API Gateway's OpenAPI validator, hence jsonschema, whose optional IRI
# format checker compiles a grammar when imported (docs/design.md, "Local stack"): nothing here checks
# formats, so jsonschema finds it absent and leaves that one format unchecked
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

REGION = "us-east-1"
DEFAULT_STACK = "dropscan-local"
ARTIFACT_BUCKET = "dropscan-local-artifacts"
# moto's CloudFormation lacks it, and moto's S3 would apply a Deny without its Bool condition
# (aws:SecureTransport), refusing every request: the TLS-only policies are set aside locally
BUCKET_POLICY = "AWS::S3::BucketPolicy"
#: moto runs no container image (no Docker here): locally, triage is the zip function, with ScanCode from
#: this environment where it is installed (the image function is for AWS: template.yaml, TriageDetector)
LOCAL_DEFAULTS = {"TriageDetector": "auto", "FirmwarePackage": "zip"}
#: what ``sam package`` would put in an image function's ImageUri (never pulled locally)
LOCAL_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/dropscan-local:{name}"


def project_root() -> Path:
    """The checkout holding template.yaml and functions/ (``DROPSCAN_HOME`` overrides)."""
    env = os.environ.get("DROPSCAN_HOME")
    candidates = [Path(env)] if env else []
    candidates += [Path(__file__).resolve().parents[3], Path.cwd()]
    for c in candidates:
        if (c / "template.yaml").is_file() and (c / "functions").is_dir():
            return c
    raise FileNotFoundError("template.yaml not found: run from the dropscan checkout or set DROPSCAN_HOME")


@dataclass(frozen=True)
class FunctionSpec:
    logical_id: str
    name: str  # physical name in moto
    code_dir: Path
    handler: str
    timeout: int
    memory: int
    environment: dict[str, str]


@dataclass(frozen=True)
class EventSourceMapping:
    function: FunctionSpec
    queue_url: str
    queue_arn: str
    batch_size: int
    report_batch_item_failures: bool


@dataclass(frozen=True)
class Schedule:
    """An EventBridge rule that invokes a function on a schedule (``rate(5 minutes)``)."""

    function: FunctionSpec
    rule: str
    expression: str

    @property
    def period_s(self) -> float:
        return schedule_period(self.expression)


_RATE_UNITS = {"minute": 60, "minutes": 60, "hour": 3600, "hours": 3600, "day": 86400, "days": 86400}


def schedule_period(expression: str) -> float:
    """Seconds between runs of ``rate(N unit)``; cron expressions are not played locally."""
    if not (expression.startswith("rate(") and expression.endswith(")")):
        raise ValueError(f"only rate() schedules run locally, not {expression!r}")
    count, unit = expression[5:-1].split()
    return float(count) * _RATE_UNITS[unit]


@dataclass
class DeployedStack:
    name: str
    outputs: dict[str, str]
    functions: dict[str, FunctionSpec]
    mappings: list[EventSourceMapping]
    physical: dict[str, str] = field(default_factory=dict)
    schedules: list[Schedule] = field(default_factory=list)

    def environment(self) -> dict[str, str]:
        """The union of the functions' variables (the template sets them in Globals, so they agree)."""
        env: dict[str, str] = {}
        for f in self.functions.values():
            for k, v in f.environment.items():
                if env.setdefault(k, v) != v:
                    raise ValueError(f"functions disagree on {k}: the local stack runs them in one process")
        return env


@dataclass
class Translation:
    template: dict[str, Any]
    code_dirs: dict[str, Path]
    notifications: dict[str, dict[str, Any]]  # bucket logical id -> NotificationConfiguration
    queue_policies: dict[str, dict[str, Any]]
    bucket_policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    identity: dict[str, dict[str, Any]] = field(default_factory=dict)  # dropscan.local.user_pool

    def to_json(self) -> dict[str, Any]:
        return {
            "template": self.template,
            "code_dirs": {k: str(v) for k, v in self.code_dirs.items()},
            "notifications": self.notifications,
            "queue_policies": self.queue_policies,
            "bucket_policies": self.bucket_policies,
            "identity": self.identity,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Translation:
        return cls(
            raw["template"],
            {k: Path(v) for k, v in raw["code_dirs"].items()},
            raw["notifications"],
            raw["queue_policies"],
            raw["bucket_policies"],
            raw.get("identity", {}),
        )


#: where translations of template.yaml are kept (else $XDG_CACHE_HOME/dropscan, ~/.cache/dropscan)
CACHE_ENV = "DROPSCAN_CACHE_DIR"


def _cache_dir() -> Path:
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "dropscan"


def cached_translation(root: Path, parameters: dict[str, str] | None = None) -> Translation:
    """:func:`translate`, kept by what it depends on (the template, the parameters, the folder, this
    module and the SAM translator's version): the translator and the jsonschema it loads take longer to
    import than the rest of a local stack's start."""
    from importlib.metadata import version

    key = hashlib.sha256()
    for part in (
        (root / "template.yaml").read_bytes(),
        json.dumps(parameters or {}, sort_keys=True).encode(),
        str(root.resolve()).encode(),
        Path(__file__).read_bytes(),
        Path(user_pool.__file__).read_bytes(),  # it rewrites the translation too
        version("aws-sam-translator").encode(),
    ):
        key.update(hashlib.sha256(part).digest())
    try:
        path = _cache_dir() / f"template-{key.hexdigest()[:32]}.json"
    except RuntimeError:  # no home folder to keep it in
        return translate(root, parameters)
    try:
        return Translation.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not kept yet, or unreadable: translated again
    tr = translate(root, parameters)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
            json.dump(tr.to_json(), f)
        os.replace(f.name, path)
    except OSError:
        pass  # a read-only home: every start translates
    return tr


def translate(root: Path, parameters: dict[str, str] | None = None) -> Translation:
    """template.yaml -> plain CloudFormation that moto can create, plus what moto would drop."""
    from samtranslator.translator.transform import transform
    from samtranslator.yaml_helper import yaml_parse

    sam = yaml_parse((root / "template.yaml").read_text())
    code_dirs = _point_code_at_artifacts(sam, root)

    class _NoManagedPolicies:
        def load(self) -> dict[str, str]:
            return {}

    os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
    cfn = transform(sam, dict(parameters or {}), _NoManagedPolicies())
    identity = user_pool.set_aside(cfn)
    notifications, policies = _set_aside_what_moto_lacks(cfn)
    bucket_policies = {n: policies.pop(n) for n, r in list(policies.items()) if r["Type"] == BUCKET_POLICY}
    # the layer's logical id carries a content hash: point it at the artifact of its SAM resource
    for name, res in cfn["Resources"].items():
        base = next((n for n in code_dirs if name.startswith(n)), None)
        if res["Type"] == "AWS::Lambda::LayerVersion" and base:
            res["Properties"]["Content"] = {"S3Bucket": ARTIFACT_BUCKET, "S3Key": f"{base}.zip"}
    return Translation(cfn, code_dirs, notifications, policies, bucket_policies, identity)


def _point_code_at_artifacts(sam: dict[str, Any], root: Path) -> dict[str, Path]:
    """Local CodeUri/ContentUri -> the artifact bucket, as ``sam package`` would do."""
    code_dirs: dict[str, Path] = {}
    for name, res in sam["Resources"].items():
        props = res.get("Properties", {})
        if props.get("PackageType") == "Image":
            props.setdefault("ImageUri", LOCAL_IMAGE.format(name=name.lower()))
        for attr in ("CodeUri", "ContentUri"):
            if isinstance(props.get(attr), str) and not props[attr].startswith("s3://"):
                code_dirs[name] = root / props[attr]
                props[attr] = f"s3://{ARTIFACT_BUCKET}/{name}.zip"
    return code_dirs


def _set_aside_what_moto_lacks(cfn: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    notifications: dict[str, dict[str, Any]] = {}
    policies: dict[str, dict[str, Any]] = {}
    for name, res in list(cfn["Resources"].items()):
        kind, props = res["Type"], res.setdefault("Properties", {})
        if kind == "AWS::Lambda::EventSourceMapping":
            # moto would invoke the function through Docker; the dispatcher delivers instead
            props["Enabled"] = False
        elif kind == "AWS::S3::Bucket" and "NotificationConfiguration" in props:
            notifications[name] = props.pop("NotificationConfiguration")
        elif kind in ("AWS::SQS::QueuePolicy", BUCKET_POLICY):
            policies[name] = cfn["Resources"].pop(name)
    for res in cfn["Resources"].values():
        deps = res.pop("DependsOn", None)
        kept = [d for d in ([deps] if isinstance(deps, str) else deps or []) if d not in policies]
        if kept:
            res["DependsOn"] = kept
    return notifications, policies


def _zip_of(directory: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for p in sorted(directory.glob("*.py")):
            zf.write(p, p.name)
    return buf.getvalue()


def _resolve(value: Any, physical: dict[str, str], arns: dict[str, str]) -> Any:
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        logical, attr = value["Fn::GetAtt"]
        if attr == "Arn":
            return arns[logical]
    if isinstance(value, dict) and "Ref" in value:
        return physical[value["Ref"]]
    return value


def deploy(
    session: boto3.session.Session,
    *,
    stack_name: str = DEFAULT_STACK,
    parameters: dict[str, str] | None = None,
    root: Path | None = None,
) -> DeployedStack:
    """Create (or reuse) the stack in the moto behind ``session`` and return how to drive it."""
    root = root or project_root()
    parameters = {**LOCAL_DEFAULTS, **(parameters or {})}
    if parameters["TriageDetector"] == "scancode":
        raise ValueError("TriageDetector=scancode is the container image, which moto cannot run: use auto")
    tr = cached_translation(root, parameters)
    cfn = session.client("cloudformation", region_name=REGION)
    s3 = session.client("s3", region_name=REGION)
    sqs = session.client("sqs", region_name=REGION)
    existing = {
        s["StackName"] for s in cfn.list_stacks()["StackSummaries"] if s["StackStatus"] != "DELETE_COMPLETE"
    }
    ids = user_pool.create(session.client("cognito-idp", region_name=REGION), tr.identity, stack_name)
    if stack_name not in existing:
        s3.create_bucket(Bucket=ARTIFACT_BUCKET)
        for name, directory in tr.code_dirs.items():
            s3.put_object(Bucket=ARTIFACT_BUCKET, Key=f"{name}.zip", Body=_zip_of(directory))
        cfn.create_stack(
            StackName=stack_name,
            TemplateBody=json.dumps(user_pool.substitute(tr.template, ids)),
            Parameters=[{"ParameterKey": k, "ParameterValue": str(v)} for k, v in (parameters or {}).items()],
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"],
        )
    resources = cfn.describe_stack_resources(StackName=stack_name)["StackResources"]
    resources = [r for r in resources if "LogicalResourceId" in r and "PhysicalResourceId" in r]
    physical = {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in resources}
    types = {r["LogicalResourceId"]: r["ResourceType"] for r in resources}
    queue_urls = {n: _queue_url(sqs, physical[n]) for n, t in types.items() if t == "AWS::SQS::Queue"}
    arns = {
        n: sqs.get_queue_attributes(QueueUrl=u, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        for n, u in queue_urls.items()
    }
    _apply_notifications(s3, tr, physical, arns)
    _apply_bucket_settings(s3, tr, physical)
    _apply_time_to_live(session.client("dynamodb", region_name=REGION), tr, physical)
    _apply_point_in_time_recovery(session.client("dynamodb", region_name=REGION), tr, physical)
    functions = _functions(session, tr, physical)
    mappings = [
        EventSourceMapping(
            function=functions[res["Properties"]["FunctionName"]["Ref"]],
            queue_url=queue_urls[res["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]],
            queue_arn=arns[res["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]],
            batch_size=int(res["Properties"].get("BatchSize", 10)),
            report_batch_item_failures="ReportBatchItemFailures"
            in res["Properties"].get("FunctionResponseTypes", []),
        )
        for name, res in tr.template["Resources"].items()
        if res["Type"] == "AWS::Lambda::EventSourceMapping"
        and name in physical  # not left out by a Condition
    ]
    stack = cfn.describe_stacks(StackName=stack_name)["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    return DeployedStack(stack_name, outputs, functions, mappings, physical, _schedules(tr, functions))


def _schedules(tr: Translation, functions: dict[str, FunctionSpec]) -> list[Schedule]:
    """EventBridge schedule rules targeting functions (moto keeps the rule but never fires it)."""
    out = []
    for name, res in tr.template["Resources"].items():
        props = res.get("Properties", {})
        if res["Type"] != "AWS::Events::Rule" or "ScheduleExpression" not in props:
            continue
        for target in props.get("Targets", []):
            logical = target["Arn"]["Fn::GetAtt"][0]
            out.append(Schedule(functions[logical], name, props["ScheduleExpression"]))
    return out


def _queue_url(sqs: Any, physical_id: str) -> str:
    if physical_id.startswith("http"):
        return physical_id
    return str(sqs.get_queue_url(QueueName=physical_id.rsplit(":", 1)[-1])["QueueUrl"])


def _apply_notifications(s3: Any, tr: Translation, physical: dict[str, str], arns: dict[str, str]) -> None:
    """moto's CloudFormation ignores a bucket's NotificationConfiguration: put it on the bucket."""
    for bucket, conf in tr.notifications.items():
        queues = []
        for q in conf.get("QueueConfigurations", []):
            entry: dict[str, Any] = {"QueueArn": _resolve(q["Queue"], physical, arns), "Events": [q["Event"]]}
            rules = q.get("Filter", {}).get("S3Key", {}).get("Rules", [])
            if rules:
                entry["Filter"] = {
                    "Key": {"FilterRules": [{"Name": r["Name"], "Value": r["Value"]} for r in rules]}
                }
            queues.append(entry)
        s3.put_bucket_notification_configuration(
            Bucket=physical[bucket], NotificationConfiguration={"QueueConfigurations": queues}
        )


def _lifecycle_rule(rule: dict[str, Any]) -> dict[str, Any]:
    """A CloudFormation lifecycle rule in the S3 API's shape (the fields the template uses)."""
    out: dict[str, Any] = {
        "ID": rule["Id"],
        "Status": rule["Status"],
        "Filter": {"Prefix": rule.get("Prefix", "")},
    }
    if "ExpirationInDays" in rule:
        out["Expiration"] = {"Days": rule["ExpirationInDays"]}
    if "AbortIncompleteMultipartUpload" in rule:
        out["AbortIncompleteMultipartUpload"] = rule["AbortIncompleteMultipartUpload"]
    return out


def _apply_bucket_settings(s3: Any, tr: Translation, physical: dict[str, str]) -> None:
    """moto's CloudFormation applies a bucket's encryption only: versioning, public access block and
    lifecycle rules are put on the bucket from the template."""
    for name, res in tr.template["Resources"].items():
        if res["Type"] != "AWS::S3::Bucket":
            continue
        props, bucket = res.get("Properties", {}), physical[name]
        if "VersioningConfiguration" in props:
            s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration=props["VersioningConfiguration"])
        if "PublicAccessBlockConfiguration" in props:
            s3.put_public_access_block(
                Bucket=bucket, PublicAccessBlockConfiguration=props["PublicAccessBlockConfiguration"]
            )
        if "LifecycleConfiguration" in props:
            rules = [_lifecycle_rule(r) for r in props["LifecycleConfiguration"]["Rules"]]
            s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": rules})


def _apply_time_to_live(dynamodb: Any, tr: Translation, physical: dict[str, str]) -> None:
    """moto's CloudFormation does not turn a table's TimeToLiveSpecification on."""
    for name, res in tr.template["Resources"].items():
        spec = res.get("Properties", {}).get("TimeToLiveSpecification")
        if res["Type"] != "AWS::DynamoDB::Table" or not spec:
            continue
        now = dynamodb.describe_time_to_live(TableName=physical[name])["TimeToLiveDescription"]
        if now.get("TimeToLiveStatus") != "ENABLED":  # a reused stack has it on already
            dynamodb.update_time_to_live(TableName=physical[name], TimeToLiveSpecification=spec)


def _apply_point_in_time_recovery(dynamodb: Any, tr: Translation, physical: dict[str, str]) -> None:
    """Nor its PointInTimeRecoverySpecification (which the embedded stack's table export needs)."""
    for name, res in tr.template["Resources"].items():
        spec = res.get("Properties", {}).get("PointInTimeRecoverySpecification")
        if res["Type"] == "AWS::DynamoDB::Table" and spec and spec.get("PointInTimeRecoveryEnabled"):
            dynamodb.update_continuous_backups(
                TableName=physical[name],
                PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True},
            )


def _functions(
    session: boto3.session.Session, tr: Translation, physical: dict[str, str]
) -> dict[str, FunctionSpec]:
    lam = session.client("lambda", region_name=REGION)
    out = {}
    for name, res in tr.template["Resources"].items():
        if res["Type"] != "AWS::Lambda::Function" or name not in physical:  # a Condition left it out
            continue
        conf = lam.get_function_configuration(FunctionName=physical[name])
        env = {k: str(v) for k, v in conf.get("Environment", {}).get("Variables", {}).items()}
        out[name] = FunctionSpec(
            logical_id=name,
            name=conf["FunctionName"],
            code_dir=tr.code_dirs[name],
            handler=conf["Handler"],
            timeout=int(conf.get("Timeout", 3)),
            memory=int(conf.get("MemorySize", 128)),
            environment=env,
        )
    return out
