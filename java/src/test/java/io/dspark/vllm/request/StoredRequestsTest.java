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

    @Test
    void aRoutingKeyChoosesAReplicaOnlyNotTheRequestKey() throws Exception {
        // A model's 'request.routing.key-column' routes a row; its request key stays the model, endpoint, body and
        // INPUT row: a row answered under one routing key (or none) is answered from the store under another.
        try (Web web = new Web((x, s) -> respond(x, 200, OK_BODY))) {
            FileSystemStore store = new FileSystemStore(dir.toUri().toString(), 0);
            org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode n = spec(web.base);
            n.putObject("routing").put("mode", "prefix");
            byte[] body = "{\"prompt\": \"question\"}".getBytes(java.nio.charset.StandardCharsets.UTF_8);
            byte[] row = "row-1".getBytes(java.nio.charset.StandardCharsets.UTF_8);
            try (StoredRequests requests = new StoredRequests(new Requester(of(n)), store, 0)) {
                StoredRequests.Answer first = get(requests.sendBody(body, null, row,
                        "user-1".getBytes(java.nio.charset.StandardCharsets.UTF_8)));
                StoredRequests.Answer again = get(requests.sendBody(body, null, row,
                        "user-2".getBytes(java.nio.charset.StandardCharsets.UTF_8)));
                StoredRequests.Answer none = get(requests.sendBody(body, null, row));
                assertTrue(first.outcome.ok() && !first.cached, String.valueOf(first.outcome.error));
                assertTrue(again.cached && none.cached);
                assertEquals(first.key, again.key);
                assertEquals(first.key, none.key);
                assertEquals(1, web.posts().size());
            }
        }
    }

    /** A store whose every lookup and put fails. */
    private static class Failing implements ResponseStore {
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

    /** A store whose puts never complete (a file system that hangs while the record is written). */
    private static final class Hung extends Failing {
        @Override
        public Stored lookup(byte[] key) {
            return null;
        }

        @Override
        public CompletableFuture<Void> put(byte[] key, byte[] cacheKey, Stored response) {
            return new CompletableFuture<>();
        }
    }

    /** A put whose record is not durable within the put's time limit is a failure: the row is answered. */
    @Test
    void aPutThatHangsIsAFailureAndTheRowIsAnswered() throws Exception {
        try (Web web = new Web((x, s) -> respond(x, 200, OK_BODY));
                StoredRequests requests =
                        new StoredRequests(new Requester(of(spec(web.base))), new Hung(), 0, 60_000, 200)) {
            String[] lines = stderrOf(() -> {
                for (int i = 0; i < 2; i++) {
                    StoredRequests.Answer a = get(requests.send("question", "row-" + i));
                    assertTrue(a.outcome.ok(), a.outcome.error);
                }
            });
            assertEquals(1, requests.storeFailures()); // then left alone for the pause
            assertEquals(1, lines.length, String.join("\n", lines));
            assertTrue(lines[0].contains("cannot be written (java.io.IOException: a record not durable within 0.2 s)"),
                    lines[0]);
        }
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

    /** What {@code work} prints on stderr, line by line (the request step's one-line messages go there). */
    static String[] stderrOf(ThrowingRunnable work) throws Exception {
        java.io.PrintStream err = System.err;
        java.io.ByteArrayOutputStream said = new java.io.ByteArrayOutputStream();
        System.setErr(new java.io.PrintStream(said, true, "UTF-8"));
        try {
            work.run();
        } finally {
            System.setErr(err);
        }
        String text = said.toString("UTF-8");
        return text.isEmpty() ? new String[0] : text.split("\n");
    }

    interface ThrowingRunnable {
        void run() throws Exception;
    }

    /**
     * The store's folder deleted while the job runs: the puts to the deleted file were durable to nobody, with no
     * line and no count, so a restore paid again. The put fails: one line, counted, every row answered.
     */
    @Test
    void aFolderDeletedMidRunIsOneLineAndCounted() throws Exception {
        Path folder = dir.resolve("store");
        try (Web web = new Web((x, s) -> respond(x, 200, OK_BODY));
                StoredRequests requests = new StoredRequests(new Requester(of(spec(web.base))),
                        new FileSystemStore(folder.toUri().toString(), 0), 0, 60_000)) {
            assertTrue(get(requests.send("question", "row-0")).outcome.ok());
            assertEquals(1, requests.stored());
            String[] lines = stderrOf(() -> {
                try (java.util.stream.Stream<Path> files = java.nio.file.Files.list(folder)) {
                    for (Path f : (Iterable<Path>) files::iterator) {
                        java.nio.file.Files.delete(f);
                    }
                }
                java.nio.file.Files.delete(folder);
                for (int i = 1; i < 4; i++) {
                    StoredRequests.Answer a = get(requests.send("question", "row-" + i));
                    assertTrue(a.outcome.ok(), a.outcome.error);
                    assertFalse(a.cached);
                }
            });
            assertEquals(1, requests.stored());
            assertEquals(1, requests.storeFailures()); // then left alone for the pause
            assertEquals(1, lines.length, String.join("\n", lines));
            assertTrue(lines[0].startsWith("dspark-vllm: the response store '")
                    && lines[0].contains("cannot be written") && lines[0].contains("is gone"), lines[0]);
            assertEquals(4, web.posts().size());
        }
    }

    /**
     * One damaged record (its body's CRC) turned the whole store off for the pause, so the rows after it were
     * paid again: it is skipped (its request sent, its answer kept again), counted, said in one line, and the
     * other records still answer.
     */
    @Test
    void aDamagedRecordIsSkippedAndTheRestAnswer() throws Exception {
        try (Web web = new Web((x, s) -> respond(x, 200, OK_BODY))) {
            try (StoredRequests first = new StoredRequests(new Requester(of(spec(web.base))),
                    new FileSystemStore(dir.toUri().toString(), 0), 0, 60_000)) {
                for (int i = 0; i < 4; i++) {
                    assertTrue(get(first.send("question", "row-" + i)).outcome.ok());
                }
            }
            Path file;
            try (java.util.stream.Stream<Path> files = java.nio.file.Files.list(dir)) {
                file = files.findFirst().orElseThrow();
            }
            try (java.io.RandomAccessFile f = new java.io.RandomAccessFile(file.toFile(), "rw")) {
                f.seek(4);
                long second = 8 + f.readInt() + 4; // row-1's record: after row-0's (magic, length, record, CRC)
                f.seek(second + 8 + 64 + 30); // inside its body
                int b = f.read();
                f.seek(second + 8 + 64 + 30);
                f.write(b ^ 0x20);
            }
            try (StoredRequests again = new StoredRequests(new Requester(of(spec(web.base))),
                    new FileSystemStore(dir.toUri().toString(), 0), 0, 60_000)) {
                boolean[] cached = new boolean[4];
                String[] lines = stderrOf(() -> {
                    for (int i = 0; i < 4; i++) {
                        StoredRequests.Answer a = get(again.send("question", "row-" + i));
                        assertTrue(a.outcome.ok(), a.outcome.error);
                        cached[i] = a.cached;
                    }
                });
                assertTrue(cached[0] && !cached[1] && cached[2] && cached[3], java.util.Arrays.toString(cached));
                assertEquals(5, web.posts().size()); // 4, and row-1 again
                assertEquals(3, again.answeredFromStore());
                assertEquals(1, again.storeFailures());
                assertEquals(1, again.stored()); // row-1's answer, kept again
                assertEquals(1, lines.length, String.join("\n", lines));
                assertTrue(lines[0].contains("damaged") && lines[0].contains("skipped"), lines[0]);
                // kept again: a third opening answers row-1 from the store
                try (StoredRequests third = new StoredRequests(new Requester(of(spec(web.base))),
                        new FileSystemStore(dir.toUri().toString(), 0), 0, 60_000)) {
                    assertTrue(get(third.send("question", "row-1")).cached);
                }
            }
        }
    }
}
