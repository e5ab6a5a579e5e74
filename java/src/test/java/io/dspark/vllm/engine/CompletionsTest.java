package io.dspark.vllm.engine;

import io.dspark.vllm.parse.PythonPlan;

import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;
import org.apache.flink.table.types.logical.VarBinaryType;
import org.apache.flink.table.types.logical.VarCharType;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The model's batching of completed requests ({@link Completions}, {@link ModelPredictFunction#complete}): what
 * completes together on many threads is handed on in batches, each item once, and each row of a batch reaches
 * its own request's future, parsed by the real parse step ({@link ParseBatch}, the native core).
 */
@Timeout(60)
final class CompletionsTest {

    @Test
    void everyItemAddedOnManyThreadsIsHandedOnOnceInBatchesOfAtMostTheSize() throws Exception {
        int threads = 8;
        int each = 20_000;
        int size = 64;
        ConcurrentLinkedQueue<List<int[]>> batches = new ConcurrentLinkedQueue<>();
        AtomicInteger handed = new AtomicInteger();
        CountDownLatch all = new CountDownLatch(1);
        Completions<int[]> c = new Completions<>("test", size, batch -> {
            batches.add(new ArrayList<>(batch)); // the list is the loop's own, reused: copied
            if (handed.addAndGet(batch.size()) == threads * each) {
                all.countDown();
            }
        });
        try {
            List<Thread> producers = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                int thread = t;
                producers.add(new Thread(() -> {
                    for (int i = 0; i < each; i++) {
                        c.add(new int[] {thread, i});
                    }
                }));
            }
            producers.forEach(Thread::start);
            for (Thread p : producers) {
                p.join();
            }
            all.await();
        } finally {
            c.close();
        }
        int[][] seen = new int[threads][each];
        int[] next = new int[threads];
        int most = 0;
        for (List<int[]> batch : batches) {
            assertTrue(batch.size() >= 1 && batch.size() <= size, "a batch of " + batch.size());
            most = Math.max(most, batch.size());
            for (int[] item : batch) {
                seen[item[0]][item[1]]++;
                assertEquals(next[item[0]]++, item[1], "a thread's items are handed on in the order added");
            }
        }
        for (int t = 0; t < threads; t++) {
            for (int i = 0; i < each; i++) {
                assertEquals(1, seen[t][i], "item " + i + " of thread " + t + " handed on once");
            }
        }
        assertEquals(threads * each, c.items());
        assertEquals(batches.size(), c.batches());
        assertTrue(most > 1, "160,000 items added at once on 8 threads came in batches of one");
    }

    @Test
    void aBatchThatThrowsCostsThatBatchOnlyAndTheNextIsHandedOn() throws Exception {
        CountDownLatch second = new CountDownLatch(1);
        AtomicInteger calls = new AtomicInteger();
        Completions<String> c = new Completions<>("test", 1, batch -> {
            if (calls.incrementAndGet() == 1) {
                throw new IllegalStateException("a defect");
            }
            second.countDown();
        });
        try {
            c.add("a");
            c.add("b");
            second.await();
        } finally {
            c.close();
        }
        assertEquals(2, c.items());
    }

    @Test
    void eachRowOfAParsedBatchCompletesItsOwnFutureOnce() throws Exception {
        RowType input = RowType.of(
                new LogicalType[] {new VarBinaryType(VarBinaryType.MAX_LENGTH)}, new String[] {"_body"});
        RowShape shape = Shapes.idAndInternal(input);
        ParseBatch parse = new ParseBatch(PythonPlan.of("openai"), shape, 0, -1, -1, false, null);
        parse.open(new UnregisteredMetricsGroup(), false, false);
        int n = 500;
        List<RowData> rows = new ArrayList<>();
        List<CompletableFuture<Collection<RowData>>> futures = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            // good bodies, a rejected one every 7th and a missing one every 11th: each its own row, in its place
            String body = i % 7 == 3 ? "{\"id\": " : "{\"id\": \"r" + i + "\"}";
            rows.add(GenericRowData.of((Object) (i % 11 == 5 ? null : body.getBytes(StandardCharsets.UTF_8))));
            futures.add(new CompletableFuture<>());
        }
        ModelPredictFunction.complete(parse, rows, futures);
        int error = shape.type().getFieldNames().indexOf("_error");
        for (int i = 0; i < n; i++) {
            assertTrue(futures.get(i).isDone() && !futures.get(i).isCompletedExceptionally(), "row " + i);
            Collection<RowData> got = futures.get(i).get();
            assertEquals(1, got.size(), "row " + i);
            RowData row = got.iterator().next();
            if (i % 11 == 5 || i % 7 == 3) {
                assertTrue(!row.isNullAt(error), "row " + i + " is an error row");
                assertTrue(row.isNullAt(0), "row " + i);
            } else {
                assertTrue(row.isNullAt(error), "row " + i + ": " + (row.isNullAt(error) ? "" : row.getString(error)));
                assertEquals("r" + i, row.getString(0).toString(), "row " + i + " got another body's row");
            }
        }
    }
}
