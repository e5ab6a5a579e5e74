package io.dspark.vllm.request;

import java.util.concurrent.CompletableFuture;

/**
 * Sends a table's requests (java.net.http.HttpClient): bounded or adaptive concurrency, a deadline per attempt
 * and per request, retries with backoff and jitter, Retry-After, a gate that holds requests back while the
 * server is down, a rate limit, a cap on body size, TLS as the spec says. The Java twin of
 * {@code connector.client.VllmClient}, with the same error kinds and messages; no Flink in here.
 *
 * <p>CONTRACT STUB: replaced by the implementation.
 */
public final class Requester implements AutoCloseable {
    public Requester(RequestSpec spec) {
        throw new UnsupportedOperationException("not implemented yet");
    }

    /** One request; the future never completes exceptionally: every failure is an {@link Outcome}. */
    public CompletableFuture<Outcome> send(String prompt, String requestId) {
        throw new UnsupportedOperationException("not implemented yet");
    }

    /** Requests started and not yet ended (waiting for a slot, at the gate, in backoff or on the wire). */
    public int inFlight() {
        return 0;
    }

    /** Attempts allowed on the wire at once now (fixed, or what the adaptive limit says). */
    public int concurrencyLimit() {
        return 0;
    }

    /** Attempts answered 429 or 503 so far. */
    public long throttled() {
        return 0;
    }

    @Override
    public void close() {}
}
