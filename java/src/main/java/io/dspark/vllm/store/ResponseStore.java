package io.dspark.vllm.store;

import java.io.IOException;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;

/**
 * Completed responses kept outside the job, so that a restore answers what was already paid for instead of sending
 * it again ({@code 'request.store'}), and an identical request can be answered from them ({@code 'request.cache'}).
 *
 * <p>A backend keeps records of (request key, cache key, stored at, status, received at, body) and an index in
 * memory from each key to where its record lies (never the bodies). {@link StoredRequests} is the one user: it
 * looks a request up before sending it and puts its response before the row leaves the request step.
 */
public interface ResponseStore extends AutoCloseable {
    /**
     * How long opening a store may go without progress before the store counts as failed (a broker that does not
     * answer, a network file system that hangs); the Kafka store's client calls each get as long.
     */
    Duration TIMEOUT = Duration.ofSeconds(10);

    /**
     * The stored response of this request key, or null; throws {@link Damaged} when its record is damaged (the
     * store is sound: that one record is skipped), another IOException when the store cannot be read.
     */
    Stored lookup(byte[] key) throws IOException;

    /** The newest stored response of this cache key stored at or after {@code notBeforeMs}, or null (as lookup). */
    Stored lookupCache(byte[] cacheKey, long notBeforeMs) throws IOException;

    /**
     * Keeps a completed response; the future completes when the record is durable (flushed and synced where the
     * file system can), or exceptionally when it could not be written.
     */
    CompletableFuture<Void> put(byte[] key, byte[] cacheKey, Stored response);

    /** Where the store keeps its records, for messages (never a Kafka URI's settings: they may hold secrets). */
    String where();

    /** What opening left out of the index as damaged (the others are indexed), or null when nothing was. */
    default Damaged damagedAtOpening() {
        return null;
    }

    @Override
    void close();

    /** A response as the store keeps it. */
    final class Stored {
        public final byte[] body;
        public final int status;
        public final long receivedAtMs;
        public final long storedAtMs;

        public Stored(byte[] body, int status, long receivedAtMs, long storedAtMs) {
            this.body = body;
            this.status = status;
            this.receivedAtMs = receivedAtMs;
            this.storedAtMs = storedAtMs;
        }
    }

    /**
     * Damaged records (a CRC that does not match, a record cut short or not of the store's layout): skipped, never
     * an answer; the store's other records are sound.
     */
    final class Damaged extends IOException {
        /** How many (1 for a lookup's; opening's may be more). */
        public final long count;

        public Damaged(String message, long count) {
            super(message);
            this.count = count;
        }
    }
}
