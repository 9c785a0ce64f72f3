"""The review desk's Cognito user pool and HTTP API on moto, whose CloudFormation knows neither.

moto's Cognito (cognito-idp) is complete enough to sign users in and issue RS256 ID tokens, but its
CloudFormation skips ``AWS::Cognito::*`` and ``AWS::ApiGatewayV2::*`` resources (and would leave the
references to them unresolved). So the translation sets them aside; the deploy creates the pool, its
client and its groups through the cognito-idp API from the same properties and writes their ids where
the template refers to them (the web function's environment, the outputs). The HTTP API itself is
played by :mod:`dropscan.local.http_api`, which checks tokens as its JWT authorizer would.
"""

from __future__ import annotations

from typing import Any

from dropscan.store.identity import ensure_group

IDENTITY_TYPES = ("AWS::Cognito::", "AWS::ApiGatewayV2::")


def set_aside(cfn: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Take the Cognito and API Gateway v2 resources (and the permissions that let the API invoke a
    function) out of ``cfn``; the outputs naming the API go too. Returns what was taken."""
    resources = cfn["Resources"]
    taken = {n: resources.pop(n) for n, r in list(resources.items()) if r["Type"].startswith(IDENTITY_TYPES)}
    for name, res in list(resources.items()):
        if res["Type"] == "AWS::Lambda::Permission" and _refers(res, set(taken)):
            taken[name] = resources.pop(name)
    apis = {n for n, r in taken.items() if r["Type"].startswith("AWS::ApiGatewayV2::")}
    for name, out in list(cfn.get("Outputs", {}).items()):
        if _refers(out, apis):
            del cfn["Outputs"][name]
    # a function's variable naming the API's address (notify's DESK_URL): empty, as the embedded stack
    # has no desk; dropscan up sets it to the desk it serves (dropscan.local.server)
    for res in resources.values():
        variables = (res.get("Properties", {}).get("Environment") or {}).get("Variables") or {}
        for k, v in variables.items():
            if _refers(v, apis):
                variables[k] = ""
    return taken


def _refers(value: Any, names: set[str]) -> bool:
    if isinstance(value, dict):
        if value.get("Ref") in names:
            return True
        att = value.get("Fn::GetAtt")
        if isinstance(att, list) and att and att[0] in names:
            return True
        sub = value.get("Fn::Sub")
        if isinstance(sub, str) and any("${" + n + "}" in sub or "${" + n + "." in sub for n in names):
            return True
        return any(_refers(v, names) for v in value.values())
    if isinstance(value, list):
        return any(_refers(v, names) for v in value)
    return False


def create(cognito: Any, taken: dict[str, dict[str, Any]], stack_name: str) -> dict[str, str]:
    """Create (or find again, on a reused stack) the user pools, clients and groups: logical id ->
    physical id, as ``Ref`` gives them."""
    physical: dict[str, str] = {}
    pools = {p["Name"]: p["Id"] for p in cognito.list_user_pools(MaxResults=60)["UserPools"]}
    for name, res in taken.items():
        if res["Type"] != "AWS::Cognito::UserPool":
            continue
        pool_name = _pool_name(res["Properties"].get("UserPoolName"), stack_name, name)
        if pool_name not in pools:
            # the template's password policy, so that a password refused on AWS is refused here too
            # (moto's own default wants a symbol and five characters)
            policies = {k: v for k, v in res["Properties"].items() if k == "Policies"}
            pools[pool_name] = cognito.create_user_pool(PoolName=pool_name, **policies)["UserPool"]["Id"]
        physical[name] = pools[pool_name]
    for name, res in taken.items():
        props = res["Properties"]
        if res["Type"] == "AWS::Cognito::UserPoolClient":
            pool = physical[props["UserPoolId"]["Ref"]]
            clients = cognito.list_user_pool_clients(UserPoolId=pool, MaxResults=60)["UserPoolClients"]
            found = [c["ClientId"] for c in clients if c["ClientName"] == props.get("ClientName", name)]
            physical[name] = (
                found[0]
                if found
                else cognito.create_user_pool_client(
                    UserPoolId=pool,
                    ClientName=props.get("ClientName", name),
                    GenerateSecret=bool(props.get("GenerateSecret", False)),
                    ExplicitAuthFlows=list(props.get("ExplicitAuthFlows", [])),
                )["UserPoolClient"]["ClientId"]
            )
        elif res["Type"] == "AWS::Cognito::UserPoolGroup":
            pool = physical[props["UserPoolId"]["Ref"]]
            ensure_group(cognito, pool, props["GroupName"], props.get("Description", ""))
            physical[name] = props["GroupName"]
    return physical


def _pool_name(value: Any, stack_name: str, logical: str) -> str:
    if isinstance(value, dict) and "Fn::Sub" in value and isinstance(value["Fn::Sub"], str):
        return str(value["Fn::Sub"]).replace("${AWS::StackName}", stack_name)
    return str(value) if isinstance(value, str) else f"{stack_name}-{logical}"


def substitute(value: Any, physical: dict[str, str]) -> Any:
    """``value`` with each ``Ref`` to a created resource replaced by its id."""
    if isinstance(value, dict):
        if set(value) == {"Ref"} and value["Ref"] in physical:
            return physical[value["Ref"]]
        return {k: substitute(v, physical) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, physical) for v in value]
    return value
