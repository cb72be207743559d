// Keeps tg_test_common non-empty when tests/common has no other sources.
