package io.dspark.vllm.store;

import io.dspark.vllm.request.Outcome;
import io.dspark.vllm.request.Recent;
import io.dspark.vllm.request.Requester;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
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
 * request body). The store's own failures (it cannot be opened, read or written; a put whose record is not durable
 * within {@link #PUT_TIMEOUT_MS}) are counted ({@link #storeFailures}) and each kind said the first time in one
 * line; the request is then sent (or its row completed) as without a store, and the store is left alone for
 * {@link #PAUSE_MS} (a broker that went down would otherwise hold each row until its put timed out), then tried
 * again: a row is never lost and the job never fails for the store. A damaged record (its CRC, a record cut short)
 * is no failure of the store: it is skipped (the request is sent and its answer kept again), counted in the same
 * metric and said the first time in one line, and the other records go on answering.
 */
public final class StoredRequests implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(StoredRequests.class);
    private static final ObjectMapper JSON = new ObjectMapper();

    private final Requester requester;
    /** How long the store is left alone after one of its failures before it is tried again. */
    public static final long PAUSE_MS = 60_000;
    /**
     * How long a put may take until its record is durable before it counts as failed (a file system that hangs;
     * the Kafka store's producer gives up at the same time: its {@code delivery.timeout.ms}).
     */
    public static final long PUT_TIMEOUT_MS = 3 * ResponseStore.TIMEOUT.toMillis();

    private ResponseStore store; // null: no store (not asked for, or it could not be opened); set once
    private final long pauseMs;
    private final long putTimeoutMs;
    private volatile long pausedUntilNs = System.nanoTime(); // after a failure: requests go without the store
    private final long cacheTtlMs; // 0: no cache
    private final byte[] url;
    private final Set<String> said = ConcurrentHashMap.newKeySet(); // the kinds of failure said already
    private final AtomicLong fromStore = new AtomicLong();
    private final AtomicLong fromCache = new AtomicLong();
    private final AtomicLong tokensSaved = new AtomicLong();
    private final AtomicLong failures = new AtomicLong();
    private final AtomicLong stored = new AtomicLong();
    private final Recent putTimes = new Recent(1000); // ms from a put to its record being durable
    private final List<Object[]> positions = new ArrayList<>(); // a Kafka store's {nanoTime, positions}, oldest first

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
        this(requester, storeUri, cacheTtlMs, subtask, null);
    }

    /**
     * @param from a Kafka store's positions from the restored checkpoint ({@link #restoredPositions}): its topic is
     *     read from there instead of whole (not with a cache, which answers from the whole topic); or null
     */
    public StoredRequests(
            Requester requester, String storeUri, long cacheTtlMs, int subtask, Map<Integer, Long> from) {
        this(requester, null, cacheTtlMs, PAUSE_MS);
        if (storeUri != null) {
            try {
                store = open(storeUri, subtask, cacheTtlMs > 0 ? null : from);
                if (store instanceof KafkaStore) {
                    KafkaStore kafka = (KafkaStore) store;
                    positions.add(new Object[] {System.nanoTime(), kafka.positions()});
                    LOG.info("dspark-vllm: the response store {} read {} records at opening ({})", store.where(),
                            kafka.recordsRead(), from != null && cacheTtlMs == 0
                                    ? "from the restored checkpoint's positions " + from : "the whole topic");
                }
            } catch (Exception e) {
                failed("cannot be opened", storeUri.split("\\?", 2)[0], e); // (a query may hold secrets)
            }
            ResponseStore.Damaged left = store == null ? null : store.damagedAtOpening();
            if (left != null) {
                damaged(left);
            }
        }
    }

    /** Over a store already open (or null); the other constructor opens the one 'request.store' names. */
    public StoredRequests(Requester requester, ResponseStore store, long cacheTtlMs) {
        this(requester, store, cacheTtlMs, PAUSE_MS);
    }

    /** With a pause of its own after a store failure (tests). */
    public StoredRequests(Requester requester, ResponseStore store, long cacheTtlMs, long pauseMs) {
        this(requester, store, cacheTtlMs, pauseMs, PUT_TIMEOUT_MS);
    }

    /** With a pause and a put's time limit of its own (tests). */
    public StoredRequests(
            Requester requester, ResponseStore store, long cacheTtlMs, long pauseMs, long putTimeoutMs) {
        this.pauseMs = pauseMs;
        this.putTimeoutMs = putTimeoutMs;
        this.requester = requester;
        this.url = requester.url().getBytes(StandardCharsets.UTF_8);
        this.cacheTtlMs = cacheTtlMs;
        this.store = store;
    }

    /** The store 'request.store' names: a Kafka topic ({@code kafka://...}), else a folder of Flink's file systems. */
    static ResponseStore open(String uri, int subtask, Map<Integer, Long> from) throws Exception {
        return uri.startsWith("kafka://") ? new KafkaStore(uri, from) : new FileSystemStore(uri, subtask);
    }

    /**
     * What a checkpoint keeps of a Kafka store (one line: where, then partition=offset pairs), or null: positions
     * of the topic below which no response of a row still in the request step can lie. A row in Flink's async
     * operator at a checkpoint (sent again after a restore, its response perhaps stored already) entered it at most
     * {@code marginMs} before (the operator's timeout and some slack), when this store knew the topic at least as
     * far as its positions taken {@code marginMs} before now; so those are kept (the opening's, if younger).
     */
    public String checkpointEntry(long marginMs) {
        if (!(store instanceof KafkaStore)) {
            return null;
        }
        long now = System.nanoTime();
        synchronized (positions) {
            positions.add(new Object[] {now, ((KafkaStore) store).positions()});
            // the newest taken at least marginMs ago stays, with all after it; older ones are of no more use
            while (positions.size() > 1 && now - (long) positions.get(1)[0] >= marginMs * 1_000_000L) {
                positions.remove(0);
            }
            @SuppressWarnings("unchecked")
            Map<Integer, Long> kept = (Map<Integer, Long>) positions.get(0)[1];
            StringBuilder line = new StringBuilder(store.where());
            new TreeMap<>(kept).forEach((p, o) -> line.append(' ').append(p).append('=').append(o));
            return line.toString();
        }
    }

    /**
     * The positions to read a Kafka store from after a restore: of the checkpoint's entries (every subtask's, from
     * union state) for this store, each partition's lowest; a partition some entry does not know, from its start.
     * Null when no entry is of this store (the whole topic is read).
     */
    public static Map<Integer, Long> restoredPositions(Iterable<String> entries, String storeUri) {
        String where = storeUri == null ? null : storeUri.split("\\?", 2)[0];
        Map<Integer, Long> lowest = null;
        for (String entry : entries) {
            String[] parts = entry.split(" ");
            if (!parts[0].equals(where)) {
                continue;
            }
            Map<Integer, Long> these = new HashMap<>();
            for (int i = 1; i < parts.length; i++) {
                String[] pair = parts[i].split("=", 2);
                these.put(Integer.parseInt(pair[0]), Long.parseLong(pair[1]));
            }
            if (lowest == null) {
                lowest = these;
            } else {
                lowest.keySet().retainAll(these.keySet());
                lowest.replaceAll((p, o) -> Math.min(o, these.get(p)));
            }
        }
        return lowest;
    }

    /**
     * The store failed: counted; one line the first time it fails so ({@code what}: cannot be opened, read or
     * written) in this request step; requests go without it for a pause.
     */
    private void failed(String what, String where, Throwable e) {
        failures.incrementAndGet();
        pausedUntilNs = System.nanoTime() + pauseMs * 1_000_000L;
        if (said.add(what)) {
            Throwable cause = e instanceof CompletionException && e.getCause() != null ? e.getCause() : e;
            say("dspark-vllm: the response store '" + where + "' " + what + " (" + cause
                    + "); requests are sent and rows completed as without a store, which is tried again "
                    + pauseMs / 1000 + " s after each failure (counted in dspark.numStoreFailures; said once)");
        }
    }

    /**
     * Damaged records (found by a lookup, or left out at opening): counted; one line the first time in this request
     * step; no pause: the store's other records are sound.
     */
    private void damaged(ResponseStore.Damaged e) {
        failures.addAndGet(e.count);
        if (said.add("damaged")) {
            say("dspark-vllm: the response store '" + store.where() + "' holds a damaged record (" + e.getMessage()
                    + "); a damaged record is skipped (its request is sent and its answer kept again) and the other "
                    + "records still answer (counted in dspark.numStoreFailures; said once)");
        }
    }

    private static void say(String line) {
        System.err.println(line);
        LOG.warn(line);
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
        return sendBody(body, requestId, identity, null);
    }

    /**
     * As {@link #sendBody(byte[], String, byte[])}, routed by {@code routingKey} among the replicas
     * ({@link Requester#sendBody(byte[], String, byte[])}; null: by the body's head). The routing key chooses a
     * replica only: the request's key in the store is the same with it or without it.
     */
    public CompletableFuture<Answer> sendBody(byte[] body, String requestId, byte[] identity, byte[] routingKey) {
        byte[] key = digest(url, body, identity);
        String hex = hex(key);
        String id = requestId == null ? hex : requestId;
        if (store == null || System.nanoTime() - pausedUntilNs < 0) {
            return requester.sendBody(body, id, routingKey).thenApply(o -> new Answer(o, hex, false));
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
        } catch (ResponseStore.Damaged e) {
            damaged(e); // sent, and its answer kept again under its key
        } catch (Exception e) {
            failed("cannot be read", store.where(), e);
        }
        return requester.sendBody(body, id, routingKey).thenCompose(o -> {
            if (!o.ok() || o.body == null || o.status == null) {
                return CompletableFuture.completedFuture(new Answer(o, hex, false)); // sent again after a restore
            }
            ResponseStore.Stored response =
                    new ResponseStore.Stored(o.body, o.status, o.receivedAtMs, System.currentTimeMillis());
            return keep(key, cacheKey, response, new Answer(o, hex, false));
        });
    }

    private CompletableFuture<Answer> keep(byte[] key, byte[] cacheKey, ResponseStore.Stored r, Answer answer) {
        if (System.nanoTime() - pausedUntilNs < 0) { // it failed while this request was on the wire
            return CompletableFuture.completedFuture(answer);
        }
        long started = System.nanoTime();
        return store.put(key, cacheKey, r).orTimeout(putTimeoutMs, TimeUnit.MILLISECONDS).handle((ok, e) -> {
            if (e != null) {
                Throwable cause = e instanceof CompletionException && e.getCause() != null ? e.getCause() : e;
                failed("cannot be written", store.where(), cause instanceof TimeoutException
                        ? new IOException("a record not durable within "
                                + FileSystemStore.seconds(Duration.ofMillis(putTimeoutMs)) + " s") : cause);
            } else {
                stored.incrementAndGet();
                putTimes.add((System.nanoTime() - started) / 1e6);
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

    /** The store's failures (opening, a lookup or a put that failed) and the damaged records it skipped. */
    public long storeFailures() {
        return failures.get();
    }

    /** Responses put in the store and durable. */
    public long stored() {
        return stored.get();
    }

    /** A percentile of the time a put took until its record was durable, in ms (the last 1,000 puts). */
    public double putMs(double percentile) {
        return putTimes.percentile(percentile);
    }

    @Override
    public void close() {
        requester.close();
        if (store != null) {
            store.close();
        }
    }
}
