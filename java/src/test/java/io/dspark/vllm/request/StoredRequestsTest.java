package io.dspark.vllm.request;

import io.dspark.vllm.store.FileSystemStore;
import io.dspark.vllm.store.ResponseStore;
import io.dspark.vllm.store.StoredRequests;

import java.io.IOException;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import static io.dspark.vllm.request.Servers.OK_BODY;
import static io.dspark.vllm.request.Servers.Web;
import static io.dspark.vllm.request.Servers.of;
import static io.dspark.vllm.request.Servers.respond;
import static io.dspark.vllm.request.Servers.spec;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The request step with a response store ({@link StoredRequests}) against a real server on 127.0.0.1 (this
 * package's {@link Servers}): answered once, then from the store; and the store's own failures (a lookup or a put
 * that fails) cost no answer: the request is sent, the row completes, the failure is counted.
 */
@Timeout(60)
final class StoredRequestsTest {
    @TempDir
    Path dir;

    private static StoredRequests.Answer get(CompletableFuture<StoredRequests.Answer> f) throws Exception {
        return f.get(30, TimeUnit.SECONDS);
    }

    @Test
    void answeredOnceThenFromTheStoreUnderTheSameKey() throws Exception {
        try (Web web = new Web((x, s) -> respond(x, 200, OK_BODY))) {
            FileSystemStore store = new FileSystemStore(dir.toUri().toString(), 0);
            try (StoredRequests requests = new StoredRequests(new Requester(of(spec(web.base))), store, 0)) {
                StoredRequests.Answer first = get(requests.send("question", "row-1"));
                StoredRequests.Answer again = get(requests.send("question", "row-1"));
                StoredRequests.Answer other = get(requests.send("question", "row-2"));
                assertTrue(first.outcome.ok() && !first.cached);
                assertTrue(again.outcome.ok() && again.cached);
                assertEquals(first.key, again.key);
                assertFalse(other.cached); // the same prompt from another row is another request
                assertEquals(2, web.posts().size());
                assertEquals(1, requests.answeredFromStore());
                assertEquals(0, requests.storeFailures());
            }
        }
    }

    /** A store whose every lookup and put fails. */
    private static final class Failing implements ResponseStore {
        @Override
        public Stored lookup(byte[] key) throws IOException {
            throw new IOException("lookup failed");
        }

        @Override
        public Stored lookupCache(byte[] cacheKey, long notBeforeMs) throws IOException {
            throw new IOException("lookup failed");
        }

        @Override
        public CompletableFuture<Void> put(byte[] key, byte[] cacheKey, Stored response) {
            CompletableFuture<Void> f = new CompletableFuture<>();
            f.completeExceptionally(new IOException("disk full"));
            return f;
        }

        @Override
        public String where() {
            return "failing";
        }

        @Override
        public void close() {}
    }

    @Test
    void aFailingStoreCostsNoAnswerAndIsLeftAloneForAPause() throws Exception {
        try (Web web = new Web((x, s) -> respond(x, 200, OK_BODY));
                StoredRequests requests = new StoredRequests(new Requester(of(spec(web.base))), new Failing(), 60_000)) {
            for (int i = 0; i < 3; i++) {
                StoredRequests.Answer a = get(requests.send("question", "row-" + i));
                assertTrue(a.outcome.ok(), a.outcome.error);
                assertFalse(a.cached);
            }
            assertEquals(3, web.posts().size());
            // the first lookup failed: the store is left alone for StoredRequests.PAUSE_MS, so a store that went
            // away does not hold every row until its put times out
            assertEquals(1, requests.storeFailures());
            assertEquals(0, requests.stored());
        }
    }

    @Test
    void aFailingStoreIsTriedAgainAfterThePause() throws Exception {
        try (Web web = new Web((x, s) -> respond(x, 200, OK_BODY));
                StoredRequests requests =
                        new StoredRequests(new Requester(of(spec(web.base))), new Failing(), 60_000, 0)) {
            for (int i = 0; i < 3; i++) {
                StoredRequests.Answer a = get(requests.send("question", "row-" + i));
                assertTrue(a.outcome.ok(), a.outcome.error);
            }
            assertEquals(3, web.posts().size());
            assertEquals(6, requests.storeFailures()); // no pause: each request's lookup and its put
            assertEquals(0, requests.stored());
        }
    }

    /**
     * After a restore a Kafka store is read from each partition's lowest position of the checkpoint's entries (one
     * per subtask, union state): of this store only; a partition some entry does not know is read from its start.
     */
    @Test
    void restoredPositionsAreEachPartitionsLowestOfThisStore() {
        String uri = "kafka://127.0.0.1:9092/answers?security.protocol=SASL_PLAINTEXT";
        java.util.List<String> entries = java.util.List.of(
                "kafka://127.0.0.1:9092/answers 0=120 1=80 2=40",
                "kafka://127.0.0.1:9092/answers 0=100 1=95",
                "kafka://127.0.0.1:9092/other 0=5 1=5 2=5");
        assertEquals(java.util.Map.of(0, 100L, 1, 80L), StoredRequests.restoredPositions(entries, uri));
        assertNull(StoredRequests.restoredPositions(java.util.List.of("kafka://h:1/other 0=5"), uri));
        assertNull(StoredRequests.restoredPositions(java.util.List.of(), uri));
    }

    @Test
    void aPromptThatCannotBeSentHasNoKey() throws Exception {
        try (Web web = new Web((x, s) -> respond(x, 200, OK_BODY));
                StoredRequests requests = new StoredRequests(new Requester(of(spec(web.base))), new Failing(), 0)) {
            StoredRequests.Answer a = get(requests.send("lone \ud800 surrogate", "row-1"));
            assertFalse(a.outcome.ok());
            assertNull(a.key);
            assertEquals(0, web.posts().size());
        }
    }

    /** A Kafka store whose broker is down when the step opens: said once in one line, every row answered. */
    @Test
    void aKafkaStoreDownAtOpenIsOneLineAndCostsNoRow() throws Exception {
        int closed;
        try (java.net.ServerSocket s = new java.net.ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            closed = s.getLocalPort(); // nothing listens there once closed
        }
        String uri = "kafka://127.0.0.1:" + closed + "/answers";
        java.io.PrintStream err = System.err;
        java.io.ByteArrayOutputStream said = new java.io.ByteArrayOutputStream();
        try (Web web = new Web((x, s) -> respond(x, 200, OK_BODY))) {
            System.setErr(new java.io.PrintStream(said, true, "UTF-8"));
            try (StoredRequests requests = new StoredRequests(new Requester(of(spec(web.base))), uri, 0, 0)) {
                for (int i = 0; i < 3; i++) {
                    StoredRequests.Answer a = get(requests.send("question", "row-" + i));
                    assertTrue(a.outcome.ok(), a.outcome.error);
                    assertFalse(a.cached);
                }
                assertEquals(3, web.posts().size());
                assertEquals(1, requests.storeFailures());
            } finally {
                System.setErr(err);
            }
        }
        String[] lines = said.toString("UTF-8").split("\n");
        assertEquals(1, lines.length, said.toString("UTF-8"));
        assertTrue(lines[0].startsWith("dspark-vllm: the response store '" + uri + "' cannot be opened ("), lines[0]);
    }
}
