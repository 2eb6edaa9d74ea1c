"""Secret redaction: env-var values, token shapes and secret-looking dict keys."""

from mcprl.redact import MASK, is_secret_name, redact


def test_env_secret_values_are_masked(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-abcdefghijklmnopqrstuvwx")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "plain-token-value-42")
    monkeypatch.setenv("DB_PASSWORD", "hunter22")
    monkeypatch.setenv("SHORT_TOKEN", "1")
    text = "key sk-test-abcdefghijklmnopqrstuvwx token plain-token-value-42 pw hunter22 n=1"
    assert redact(text) == f"key {MASK} token {MASK} pw {MASK} n=1"


def test_env_values_are_read_at_call_time(monkeypatch):
    assert redact("value-xyz-123") == "value-xyz-123"
    monkeypatch.setenv("LATE_SECRET", "value-xyz-123")
    assert redact("value-xyz-123") == MASK


def test_token_shapes_are_masked():
    samples = [
        "sk-proj-" + "a" * 30,
        "sk-ant-api03-" + "b" * 30,
        "xoxb-123456789012-abcdefABCDEF",
        "AKIAABCDEFGHIJKLMNOP",
        "ghp_" + "c" * 36,
        "hf_" + "d" * 34,
        "AIza" + "e" * 35,
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXh5eg",
    ]
    for secret in samples:
        out = redact(f"before {secret} after")
        assert secret not in out and out == f"before {MASK} after", secret
    assert redact("Authorization: Bearer abc.def-ghi_jkl") == f"Authorization: Bearer {MASK}"
    assert redact("postgres://user:p4ssw0rd@db:5432/x") == f"postgres://user:{MASK}@db:5432/x"
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----"
    assert redact(f"k={pem}!") == f"k={MASK}!"


def test_structures_are_copied_with_secret_keys_masked(monkeypatch):
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-not-matching-shape")
    value = {
        "data": {"api_key": "abc", "total_tokens": 12, "token": "", "note": ["xoxb-not-matching-shape", ("ok",)]},
        "password": "p",
        "ticker": "AAPL",
    }
    out = redact(value)
    assert out == {
        "data": {"api_key": MASK, "total_tokens": 12, "token": "", "note": [MASK, ("ok",)]},
        "password": MASK,
        "ticker": "AAPL",
    }
    assert value["data"]["api_key"] == "abc"  # the input is not modified


def test_deep_structures_do_not_recurse_forever():
    deep = current = {}
    for _ in range(500):
        current["x"] = {}
        current = current["x"]
    assert "x" in redact(deep)


def test_secret_names():
    for name in ["OPENAI_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "GOOGLE_CREDENTIALS", "SMTP_PASS"]:
        assert is_secret_name(name), name
    for name in ["PATH", "HOME", "TOKENIZERS_PARALLELISM", "KEYBOARD", "PWD", "OPENAI_BASE_URL"]:
        assert not is_secret_name(name), name
