"""The security settings of the template, as the deployed local stack has them."""

from __future__ import annotations

from dropscan.local.embedded import EmbeddedStack


def test_buckets_block_public_access_encrypt_and_expire_work_files(stack: EmbeddedStack) -> None:
    s3 = stack.client.s3
    names = stack.names
    for bucket in (names.drops_bucket, names.results_bucket, names.upstream_bucket):
        block = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
        assert all(block.values()), bucket
        [rule] = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
        assert rule["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert s3.get_bucket_versioning(Bucket=names.drops_bucket)["Status"] == "Enabled"
    rules = s3.get_bucket_lifecycle_configuration(Bucket=names.results_bucket)["Rules"]
    [work] = [r for r in rules if r.get("Filter", {}).get("Prefix") == "work/"]
    assert work["Expiration"]["Days"] == 7


def test_queues_and_topic_are_encrypted_and_idempotency_records_expire(stack: EmbeddedStack) -> None:
    sqs = stack.session.client("sqs")
    queues = [url for url in sqs.list_queues()["QueueUrls"] if "-mailbox" not in url]
    assert len(queues) == 14  # seven queues and their dead-letter queues
    for url in queues:
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["SqsManagedSseEnabled"])["Attributes"]
        assert attrs["SqsManagedSseEnabled"] == "true", url
    topic = stack.session.client("sns").get_topic_attributes(TopicArn=stack.names.topic_arn)["Attributes"]
    assert topic["KmsMasterKeyId"] == "alias/aws/sns"
    ttl = stack.session.client("dynamodb").describe_time_to_live(
        TableName=stack.stack.physical["IdempotencyTable"]
    )["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", "expiration")
