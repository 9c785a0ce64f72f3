"""The review desk's users in the Cognito user pool: sign-in (the desk's one public call), the first
sign-in's new password, and the administration ``dropscan users`` does. Groups say whose drops a user
sees (dropscan.web.access)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import boto3
from botocore import UNSIGNED
from botocore.config import Config


class SignInError(Exception):
    """Wrong name or password, or an account that cannot sign in yet: one message for all of them."""


class PasswordRefused(Exception):
    """A new password the pool's policy refuses (InvalidPasswordException): the message says why."""


#: the pool's password policy in words (template.yaml's UserPool; tests/infra holds the two together)
POLICY = "at least 12 characters, with upper and lower case letters and a digit"


@dataclass(frozen=True)
class NewPasswordRequired:
    """A first sign-in with the temporary password an administrator set: Cognito answered the
    NEW_PASSWORD_REQUIRED challenge, whose session (minutes long, for one answer) takes the user's own
    password (:func:`set_new_password`). No token yet."""

    username: str
    session: str


@dataclass(frozen=True)
class Tokens:
    id_token: str
    expires_in: int
    access_token: str = ""
    refresh_token: str = ""  # empty on a renewal: the refresh token stays the one of the sign-in


def client(region: str, endpoint_url: str | None = None, *, signed: bool = True) -> Any:
    """A cognito-idp client; unsigned for sign-in, which needs no credentials (the function's role
    grants nothing on the pool)."""
    config = None if signed else Config(signature_version=UNSIGNED)
    return boto3.session.Session().client(
        "cognito-idp", region_name=region, endpoint_url=endpoint_url, config=config
    )


def sign_in(cognito: Any, client_id: str, username: str, password: str) -> Tokens | NewPasswordRequired:
    """USER_PASSWORD_AUTH: the ID token (its claims name the user and their groups), or, for a user whose
    password is still the temporary one, the challenge to choose their own."""
    if not username or not password:
        raise SignInError("name and password, please")
    try:
        resp = cognito.initiate_auth(
            ClientId=client_id,
            AuthFlow="USER_PASSWORD_AUTH",
            AuthParameters={"USERNAME": username, "PASSWORD": password},
        )
    except cognito.exceptions.ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        if code in (
            "NotAuthorizedException",
            "UserNotFoundException",
            "UserNotConfirmedException",
            "PasswordResetRequiredException",
            "InvalidParameterException",
        ):
            raise SignInError("wrong name or password") from e
        raise
    result = resp.get("AuthenticationResult")
    if result:
        return _tokens(result)
    if resp.get("ChallengeName") == "NEW_PASSWORD_REQUIRED" and resp.get("Session"):
        params = resp.get("ChallengeParameters") or {}
        # the pool's own name of the user (the one RespondToAuthChallenge wants), else the name typed
        name = str(params.get("USER_ID_FOR_SRP") or params.get("USERNAME") or username)
        return NewPasswordRequired(username=name, session=str(resp["Session"]))
    # another challenge (MFA): the pool has none configured, and the desk answers none
    raise SignInError(f"this account must first be set up ({resp.get('ChallengeName', 'challenge')})")


def set_new_password(cognito: Any, client_id: str, username: str, session: str, new_password: str) -> Tokens:
    """Answer the NEW_PASSWORD_REQUIRED challenge with the user's own password (RespondToAuthChallenge):
    the tokens of a sign-in, the temporary password gone. :class:`PasswordRefused` when the policy
    refuses the password; :class:`SignInError` when the session has expired or was made up."""
    if not username or not 20 <= len(session) <= 2048:  # the API's bounds: nothing else is a session
        raise SignInError("no sign-in to finish: sign in with your temporary password")
    if not new_password:
        raise PasswordRefused(f"choose a password: {POLICY}")
    try:
        resp = cognito.respond_to_auth_challenge(
            ClientId=client_id,
            ChallengeName="NEW_PASSWORD_REQUIRED",
            Session=session,
            ChallengeResponses={"USERNAME": username, "NEW_PASSWORD": new_password},
        )
    except cognito.exceptions.ClientError as e:
        error = e.response.get("Error", {})
        code = error.get("Code", "")
        if code == "InvalidPasswordException":
            raise PasswordRefused(f"the pool's policy refuses this password: {POLICY}") from e
        if code == "InvalidParameterException":  # e.g. a password of blanks, or one too long
            raise PasswordRefused(f"this password cannot be used: {POLICY}") from e
        if code in (
            "NotAuthorizedException",  # the session expired (three minutes) or was used
            "ResourceNotFoundException",  # a session Cognito never issued (moto says so)
            "CodeMismatchException",
            "ExpiredCodeException",
            "UserNotFoundException",
        ):
            raise SignInError("this sign-in has expired: sign in again with your temporary password") from e
        raise
    result = resp.get("AuthenticationResult")
    if not result:
        raise SignInError(f"this account must first be set up ({resp.get('ChallengeName', 'challenge')})")
    return _tokens(result)


def _tokens(result: Any) -> Tokens:
    return Tokens(
        id_token=result["IdToken"],
        expires_in=int(result.get("ExpiresIn", 3600)),
        access_token=str(result.get("AccessToken") or ""),
        refresh_token=str(result.get("RefreshToken") or ""),
    )


def refresh(cognito: Any, client_id: str, refresh_token: str) -> Tokens:
    """REFRESH_TOKEN_AUTH: a new ID token for the session; :class:`SignInError` once the refresh token
    has expired or was revoked (signed out)."""
    if not refresh_token:
        raise SignInError("no session to renew: sign in")
    try:
        resp = cognito.initiate_auth(
            ClientId=client_id,
            AuthFlow="REFRESH_TOKEN_AUTH",
            AuthParameters={"REFRESH_TOKEN": refresh_token},
        )
    except cognito.exceptions.ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        if code in ("NotAuthorizedException", "ResourceNotFoundException", "InvalidParameterException"):
            raise SignInError("the session has ended: sign in again") from e
        raise
    return _tokens(resp["AuthenticationResult"])


def sign_out(cognito: Any, access_token: str) -> None:
    """GlobalSignOut with the session's access token: its refresh tokens are revoked (no renewal) and
    its access tokens too. An access token already invalid is a session already ended."""
    if not access_token:
        return
    try:
        cognito.global_sign_out(AccessToken=access_token)
    except cognito.exceptions.ClientError as e:
        if e.response.get("Error", {}).get("Code", "") != "NotAuthorizedException":
            raise


def add_user(
    cognito: Any, pool: str, username: str, password: str, groups: list[str], *, temporary: bool = False
) -> None:
    """Create the user (or find it) with ``password``, and put it in ``groups`` (created when missing).
    A ``temporary`` password signs in once, to choose the user's own (FORCE_CHANGE_PASSWORD: Cognito
    answers the sign-in with NEW_PASSWORD_REQUIRED); otherwise it is the user's password from now on."""
    with contextlib.suppress(cognito.exceptions.UsernameExistsException):
        # no message: the pool sends no e-mail; the administrator hands the password over
        cognito.admin_create_user(UserPoolId=pool, Username=username, MessageAction="SUPPRESS")
    # one call for both kinds (and for a user found again): the pool's policy is checked either way
    cognito.admin_set_user_password(
        UserPoolId=pool, Username=username, Password=password, Permanent=not temporary
    )
    for g in groups:
        ensure_group(cognito, pool, g)
        cognito.admin_add_user_to_group(UserPoolId=pool, Username=username, GroupName=g)


def ensure_group(cognito: Any, pool: str, group: str, description: str = "") -> None:
    try:
        cognito.get_group(GroupName=group, UserPoolId=pool)
    except cognito.exceptions.ResourceNotFoundException:
        cognito.create_group(GroupName=group, UserPoolId=pool, Description=description)


def groups_of(cognito: Any, pool: str, username: str) -> list[str]:
    resp = cognito.admin_list_groups_for_user(UserPoolId=pool, Username=username)
    return sorted(g["GroupName"] for g in resp.get("Groups", []))


def pool_of(stack: str, endpoint_url: str | None = None) -> tuple[Any, str, str]:
    """(cognito-idp client, user pool id, app client id) of a running stack, from its outputs."""
    session = boto3.session.Session()
    cfn = session.client("cloudformation", endpoint_url=endpoint_url)
    outputs = cfn.describe_stacks(StackName=stack)["Stacks"][0].get("Outputs", [])
    found = {o["OutputKey"]: o["OutputValue"] for o in outputs}
    if "UserPoolId" not in found:
        raise LookupError(f"stack {stack} has no user pool (deployed before the review desk?)")
    cognito = session.client("cognito-idp", endpoint_url=endpoint_url)
    return cognito, found["UserPoolId"], found.get("UserPoolClientId", "")
