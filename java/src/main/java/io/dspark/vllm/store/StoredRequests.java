package io.dspark.vllm.store;

import io.dspark.vllm.request.Outcome;
import io.dspark.vllm.request.Requester;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The request step with a response store: the one wrapper around {@link Requester} that the table's
 * {@code RequestStep} and the model's {@code ModelPredictFunction} both use. A request is answered from the
 * store when its request key is there (a restore: it was answered before the failure), else, with
 * {@code 'request.cache'}, from a response to an identical request (same endpoint and body) stored within the
 * TTL, else sent; a sent request's response (a 2xx body) is put in the store and the answer completes when the
 * record is durable, so a row never leaves the request step before its response is kept.
 *
 * <p>The keys, SHA-256 over length-prefixed parts: the request key of (endpoint URL, request body, the row's
 * identity: the table's request id, or the model's name and whole INPUT row); the cache key of (endpoint URL,
 * request body). The store's own failures (it cannot be opened, read or written) are said once in one line and
 * counted ({@link #storeFailures}); the request is then sent (or its row completed) as without a store: a row is
 * never lost and the job never fails for the store.
 */
public final class StoredRequests implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(StoredRequests.class);
    private static final ObjectMapper JSON = new ObjectMapper();

    private final Requester requester;
    private ResponseStore store; // null: no store (not asked for, or it could not be opened); set once
    private final long cacheTtlMs; // 0: no cache
    private final byte[] url;
    private final AtomicBoolean said = new AtomicBoolean();
    private final AtomicLong fromStore = new AtomicLong();
    private final AtomicLong fromCache = new AtomicLong();
    private final AtomicLong tokensSaved = new AtomicLong();
    private final AtomicLong failures = new AtomicLong();
    private final AtomicLong stored = new AtomicLong();

    /** A request's answer: its outcome, its request key (hex) and whether it came from the store. */
    public static final class Answer {
        public final Outcome outcome;
        public final String key;
        public final boolean cached;

        public Answer(Outcome outcome, String key, boolean cached) {
            this.outcome = outcome;
            this.key = key;
            this.cached = cached;
        }
    }

    /**
     * @param storeUri the store's place ({@code 'request.store'}), or null for none
     * @param cacheTtlMs {@code 'request.cache'} in ms, 0 for none
     */
    public StoredRequests(Requester requester, String storeUri, long cacheTtlMs, int subtask) {
        this(requester, null, cacheTtlMs);
        if (storeUri != null) {
            try {
                store = open(storeUri, subtask);
            } catch (Exception e) {
                failed("cannot be opened", storeUri.split("\\?", 2)[0], e); // (a query may hold secrets)
            }
        }
    }

    /** Over a store already open (or null); the other constructor opens the one 'request.store' names. */
    public StoredRequests(Requester requester, ResponseStore store, long cacheTtlMs) {
        this.requester = requester;
        this.url = requester.url().getBytes(StandardCharsets.UTF_8);
        this.cacheTtlMs = cacheTtlMs;
        this.store = store;
    }

    /** The store 'request.store' names: a Kafka topic ({@code kafka://...}), else a folder of Flink's file systems. */
    static ResponseStore open(String uri, int subtask) throws Exception {
        return uri.startsWith("kafka://") ? new KafkaStore(uri) : new FileSystemStore(uri, subtask);
    }

    /** One line, once per request step: the store failed; the requests are sent as without it. */
    private void failed(String what, String where, Throwable e) {
        failures.incrementAndGet();
        if (said.compareAndSet(false, true)) {
            Throwable cause = e instanceof java.util.concurrent.CompletionException && e.getCause() != null
                    ? e.getCause() : e;
            String line = "dspark-vllm: the response store '" + where + "' " + what + " (" + cause
                    + "); requests are sent and rows completed as without a store (counted in dspark.numStoreFailures; "
                    + "said once)";
            System.err.println(line);
            LOG.warn(line);
        }
    }

    /** A table's prompt ({@link Requester#send}), its row identified by the table's request id. */
    public CompletableFuture<Answer> send(String prompt, String requestId) {
        byte[] body = requester.bodyOf(prompt);
        if (body == null) { // not sendable: the requester says why, with no key to store it under
            return requester.send(prompt, requestId).thenApply(o -> new Answer(o, null, false));
        }
        return sendBody(body, requestId,
                requestId == null ? new byte[0] : requestId.getBytes(StandardCharsets.UTF_8));
    }

    /** A request body the caller made; {@code identity} tells its row apart from others with the same body. */
    public CompletableFuture<Answer> sendBody(byte[] body, String requestId, byte[] identity) {
        byte[] key = digest(url, body, identity);
        String hex = hex(key);
        String id = requestId == null ? hex : requestId;
        if (store == null) {
            return requester.sendBody(body, id).thenApply(o -> new Answer(o, hex, false));
        }
        byte[] cacheKey = digest(url, body);
        try {
            ResponseStore.Stored hit = store.lookup(key);
            if (hit == null && cacheTtlMs > 0) {
                hit = store.lookupCache(cacheKey, System.currentTimeMillis() - cacheTtlMs);
                if (hit != null) {
                    fromCache.incrementAndGet();
                    // kept under this request's key too, so a restore finds it whatever the cache holds then
                    return keep(key, cacheKey, hit, new Answer(answered(hit), hex, true));
                }
            } else if (hit != null) {
                fromStore.incrementAndGet();
            }
            if (hit != null) {
                return CompletableFuture.completedFuture(new Answer(answered(hit), hex, true));
            }
        } catch (Exception e) {
            failed("cannot be read", store.where(), e);
        }
        return requester.sendBody(body, id).thenCompose(o -> {
            if (!o.ok() || o.body == null || o.status == null) {
                return CompletableFuture.completedFuture(new Answer(o, hex, false)); // sent again after a restore
            }
            ResponseStore.Stored response =
                    new ResponseStore.Stored(o.body, o.status, o.receivedAtMs, System.currentTimeMillis());
            return keep(key, cacheKey, response, new Answer(o, hex, false));
        });
    }

    private CompletableFuture<Answer> keep(byte[] key, byte[] cacheKey, ResponseStore.Stored r, Answer answer) {
        return store.put(key, cacheKey, r).handle((ok, e) -> {
            if (e != null) {
                failed("cannot be written", store.where(), e);
            } else {
                stored.incrementAndGet();
            }
            return answer;
        });
    }

    private Outcome answered(ResponseStore.Stored hit) {
        tokensSaved.addAndGet(tokens(hit.body));
        return new Outcome(hit.body, hit.status, 0.0, 0, null, null, hit.receivedAtMs);
    }

    static long tokens(byte[] body) {
        try {
            JsonNode usage = JSON.readTree(body).path("usage");
            return usage.path("total_tokens").asLong(
                    usage.path("prompt_tokens").asLong(0) + usage.path("completion_tokens").asLong(0));
        } catch (Exception e) {
            return 0;
        }
    }

    static byte[] digest(byte[]... parts) {
        try {
            MessageDigest sha = MessageDigest.getInstance("SHA-256");
            for (byte[] part : parts) {
                sha.update(ByteBuffer.allocate(4).putInt(part.length).array());
                sha.update(part);
            }
            return sha.digest();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is part of every JVM", e);
        }
    }

    static String hex(byte[] bytes) {
        StringBuilder b = new StringBuilder(bytes.length * 2);
        for (byte x : bytes) {
            b.append(Character.forDigit((x >> 4) & 0xF, 16)).append(Character.forDigit(x & 0xF, 16));
        }
        return b.toString();
    }

    public Requester requester() {
        return requester;
    }

    /** Requests answered from the store under their own key (after a restore), not sent. */
    public long answeredFromStore() {
        return fromStore.get();
    }

    /** Requests answered from the cache ('request.cache'), not sent. */
    public long answeredFromCache() {
        return fromCache.get();
    }

    /** Tokens of the responses answered from the store or the cache ({@code usage.total_tokens}). */
    public long tokensSaved() {
        return tokensSaved.get();
    }

    /** The store's failures: opening, a lookup or a put that failed. */
    public long storeFailures() {
        return failures.get();
    }

    /** Responses put in the store and durable. */
    public long stored() {
        return stored.get();
    }

    @Override
    public void close() {
        requester.close();
        if (store != null) {
            store.close();
        }
    }
}
