"""wapflow.redact: the one scrubber every way out uses (errors, alert deliveries, lineage, S3, the run store)."""

from __future__ import annotations

from wapflow.redact import redact


def test_url_passwords_are_masked_without_being_named() -> None:
    text = "postgresql+psycopg://wap:s3cr3t@db/lake and jdbc:postgresql://db/lake?user=u&password=hunter22"
    assert redact(text) == "postgresql+psycopg://wap:***@db/lake and jdbc:postgresql://db/lake?user=u&password=***"


def test_named_secrets_longest_first_so_a_url_holding_a_token_goes_whole() -> None:
    hook = "https://hooks.slack.example/services/T0/B0/tok3n"
    out = redact(f"POST {hook} failed: 404 for tok3n", [hook, "tok3n"], None)
    assert out == "POST *** failed: 404 for ***"


def test_short_secrets_are_left_so_messages_stay_readable() -> None:
    assert redact("a run of table ab failed", "ab", "") == "a run of table ab failed"


def test_iterables_and_single_strings_mix() -> None:
    assert redact("key AKIAX secret s3kr1t token t0k3n", ("AKIAX", "s3kr1t"), "t0k3n") == (
        "key *** secret *** token ***"
    )


def test_a_spark_connect_urls_token_is_masked() -> None:
    assert redact("sc://h:15002/;use_ssl=true;token=abc123def") == "sc://h:15002/;use_ssl=true;token=***"
