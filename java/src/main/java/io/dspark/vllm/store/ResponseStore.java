package io.dspark.vllm.store;

import java.io.IOException;
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

    /** The stored response of this request key, or null; throws when the store cannot be read. */
    Stored lookup(byte[] key) throws IOException;

    /** The newest stored response of this cache key stored at or after {@code notBeforeMs}, or null. */
    Stored lookupCache(byte[] cacheKey, long notBeforeMs) throws IOException;

    /**
     * Keeps a completed response; the future completes when the record is durable (flushed and synced where the
     * file system can), or exceptionally when it could not be written.
     */
    CompletableFuture<Void> put(byte[] key, byte[] cacheKey, Stored response);

    /** Where the store keeps its records, for messages. */
    String where();

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
}
