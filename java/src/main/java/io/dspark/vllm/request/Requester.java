package io.dspark.vllm.request;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.concurrent.CompletableFuture;

/** SCRATCH: a minimal requester for integration tests; replaced by the real one. */
public final class Requester implements AutoCloseable {
    private final RequestSpec spec;
    private final HttpClient http;
    private final ArrayDeque<Runnable> waiting = new ArrayDeque<>();
    private int onWire;
    private int started;
    private static final ObjectMapper JSON = new ObjectMapper();

    public Requester(RequestSpec spec) {
        this.spec = spec;
        this.http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(Duration.ofMillis((long) (spec.connectTimeoutS * 1000))).build();
    }

    public CompletableFuture<Outcome> send(String prompt, String requestId) {
        CompletableFuture<Outcome> done = new CompletableFuture<>();
        long t0 = System.nanoTime();
        Runnable go = () -> {
            try {
                HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(spec.url))
                        .timeout(Duration.ofMillis((long) (spec.timeoutS * 1000)))
                        .POST(HttpRequest.BodyPublishers.ofString(spec.body(JSON.writeValueAsString(prompt))));
                spec.headers.forEach((k, v) -> { if (!k.equals("user-agent")) b.header(k, v); });
                b.header("x-request-id", requestId);
                http.sendAsync(b.build(), HttpResponse.BodyHandlers.ofByteArray()).whenComplete((r, e) -> {
                    release();
                    double ms = (System.nanoTime() - t0) / 1e6;
                    if (e != null) {
                        done.complete(new Outcome(null, null, ms, 1, "connect: " + e, "connect", System.currentTimeMillis()));
                    } else if (r.statusCode() / 100 == 2) {
                        done.complete(new Outcome(r.body(), r.statusCode(), ms, 1, null, null, System.currentTimeMillis()));
                    } else {
                        done.complete(new Outcome(r.body(), r.statusCode(), ms, 1, "status: HTTP " + r.statusCode(), "status", System.currentTimeMillis()));
                    }
                });
            } catch (Exception e) {
                release();
                done.complete(new Outcome(null, null, 0, 0, "request: " + e, "request", System.currentTimeMillis()));
            }
        };
        synchronized (this) {
            started++;
            if (onWire < spec.concurrency) { onWire++; } else { waiting.add(go); return done; }
        }
        go.run();
        return done;
    }

    private void release() {
        Runnable next;
        synchronized (this) {
            started--;
            next = waiting.poll();
            if (next == null) { onWire--; return; }
        }
        next.run();
    }

    public synchronized int inFlight() { return started; }
    public int concurrencyLimit() { return spec.concurrency; }
    public long throttled() { return 0; }
    @Override public void close() {}
}
