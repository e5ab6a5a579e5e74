package io.dspark.vllm.parse;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The JNI boundary (NativeParser -> NativeCore -> native/jni/dspark_jni.c -> the core -> ArrowColumn) driven
 * with hostile inputs from Java, where the libFuzzer targets (native/fuzz) cannot go: mutated bodies (empty,
 * up to 4 MiB, invalid UTF-8, NUL bytes, deep nesting, truncated), null bodies, batches of zero and of
 * thousands, sub-ranges of a larger array, plans that are random bytes, truncated or of another version, and
 * calls from several threads at once. Seeded (the same cases every run) and bounded (seconds). What holds: no
 * crash, no exception but the documented ones, exactly one row or error row per body, each body's row the same
 * alone as in its batch, and the same result from a second call. The plan is the Python planner's for the
 * openai profile (PythonPlan), with every body column read.
 */
@Timeout(120)
final class NativeBoundaryTest {
    private static final long SEED = 32;
    private static final String VALID = "{\"id\":\"chatcmpl-7\",\"object\":\"chat.completion\",\"created\":1700000000,"
            + "\"model\":\"m\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"h\\u00e9llo "
            + "\\ud83d\\ude00 {\\\"a\\\": [1, 2.5, true, null]}\"},\"logprobs\":null,\"finish_reason\":\"stop\"}],"
            + "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5,\"total_tokens\":8}}";
    private static io.dspark.vllm.plan.Plan.NativeRead read;
    private static String document;
    private static List<String> columns;

    @BeforeAll
    static void plan() throws Exception {
        assertNull(NativeCore.available());
        read = PythonPlan.of("openai");
        document = read.document;
        columns = new ArrayList<>();
        read.columns.forEach(column -> columns.add(column.name));
        assertTrue(columns.contains("id"), document);
    }

    // -- bodies ---------------------------------------------------------------------------------------------------

    private static final byte[][] SEEDS = {
        VALID.getBytes(StandardCharsets.UTF_8),
        "{\"error\":{\"message\":\"overloaded\",\"code\":503}}".getBytes(StandardCharsets.UTF_8),
        "{\"id\":1,\"choices\":[]}".getBytes(StandardCharsets.UTF_8),
        "[1,2,3]".getBytes(StandardCharsets.UTF_8),
        "\uFEFF{\"id\":\"x\"}".getBytes(StandardCharsets.UTF_8),
        "{\"id\":\"a\",\"id\":\"b\",\"created\":99999999999999999999}".getBytes(StandardCharsets.UTF_8),
        new byte[0],
    };

    private static final byte[][] INSERTS = {
        {0}, {(byte) 0xff}, {(byte) 0xc3, 0x28}, {(byte) 0xed, (byte) 0xa0, (byte) 0x80}, {(byte) 0xf4, (byte) 0x90},
        "\\u0000".getBytes(StandardCharsets.UTF_8), "\\ud800".getBytes(StandardCharsets.UTF_8),
        "{".getBytes(StandardCharsets.UTF_8), "]".getBytes(StandardCharsets.UTF_8),
        "\"".getBytes(StandardCharsets.UTF_8),
        "1e999999".getBytes(StandardCharsets.UTF_8), "-0.0".getBytes(StandardCharsets.UTF_8),
        "null".getBytes(StandardCharsets.UTF_8), ",\"id\":null".getBytes(StandardCharsets.UTF_8),
        "```json\n{\"k\":1}\n```".getBytes(StandardCharsets.UTF_8),
    };

    /** A body from a seed, mutated 0..7 times: a byte flipped, a token inserted, a cut, a part repeated. */
    static byte[] mutated(Random random) {
        byte[] body = SEEDS[random.nextInt(SEEDS.length)].clone();
        int steps = random.nextInt(8);
        for (int s = 0; s < steps; s++) {
            int at = body.length == 0 ? 0 : random.nextInt(body.length + 1);
            switch (random.nextInt(5)) {
                case 0:
                    if (body.length > 0) {
                        body[Math.min(at, body.length - 1)] ^= (byte) (1 << random.nextInt(8));
                    }
                    break;
                case 1:
                    body = splice(body, at, at, INSERTS[random.nextInt(INSERTS.length)]);
                    break;
                case 2:
                    body = Arrays.copyOf(body, at);
                    break;
                case 3:
                    int end = at + random.nextInt(body.length - at + 1);
                    body = splice(body, at, at, Arrays.copyOfRange(body, at, end));
                    break;
                default:
                    byte[] junk = new byte[random.nextInt(16)];
                    random.nextBytes(junk);
                    body = splice(body, at, Math.min(body.length, at + junk.length), junk);
                    break;
            }
        }
        return body;
    }

    private static byte[] splice(byte[] body, int from, int to, byte[] insert) {
        byte[] out = new byte[body.length - (to - from) + insert.length];
        System.arraycopy(body, 0, out, 0, from);
        System.arraycopy(insert, 0, out, from, insert.length);
        System.arraycopy(body, to, out, from + insert.length, body.length - to);
        return out;
    }

    /** Bodies of up to 4 MiB: a long content, deep nesting, random bytes, NULs, one cut in a string. */
    static List<byte[]> large(Random random) {
        List<byte[]> out = new ArrayList<>();
        String content = "x".repeat(3 << 20);
        out.add(VALID.replace("\"content\":\"h", "\"content\":\"" + content).getBytes(StandardCharsets.UTF_8));
        byte[] cut = out.get(0);
        out.add(Arrays.copyOf(cut, cut.length / 2));
        out.add(("[".repeat(1 << 20)).getBytes(StandardCharsets.UTF_8));
        String deep = "{\"id\":" + "{\"a\":".repeat(100_000) + "1" + "}".repeat(100_000) + "}";
        out.add(deep.getBytes(StandardCharsets.UTF_8));
        byte[] noise = new byte[4 << 20];
        random.nextBytes(noise);
        out.add(noise);
        out.add(new byte[2 << 20]);
        StringBuilder many = new StringBuilder("{\"id\":\"m\",\"choices\":[");
        for (int i = 0; i < 50_000; i++) {
            many.append(i == 0 ? "" : ",").append("{\"index\":").append(i).append(",\"message\":{\"content\":\"c\"}}");
        }
        out.add(many.append("]}").toString().getBytes(StandardCharsets.UTF_8));
        return out;
    }

    // -- results --------------------------------------------------------------------------------------------------

    private static NativeParser parser() {
        return new NativeParser(read);
    }

    /** One line per body of bodies[from..to): every column's value, by key; asserts one row per body. */
    static List<String> rows(NativeParser parser, byte[][] bodies, int from, int to) {
        List<Map<String, ArrowColumn>> parts = parser.parse(bodies, from, to);
        List<String> rows = new ArrayList<>();
        for (Map<String, ArrowColumn> part : parts) {
            TreeMap<String, ArrowColumn> sorted = new TreeMap<>(part);
            int n = sorted.get(NativeParser.VERDICT).length;
            for (ArrowColumn column : sorted.values()) {
                assertEquals(n, column.length, "a column's length in a part");
            }
            for (int i = 0; i < n; i++) {
                StringBuilder row = new StringBuilder();
                for (Map.Entry<String, ArrowColumn> e : sorted.entrySet()) {
                    row.append(e.getKey().replace('\0', '!')).append('=').append(cell(e.getValue(), i)).append(';');
                }
                ArrowColumn verdict = sorted.get(NativeParser.VERDICT);
                String reason = sorted.get(NativeParser.REASON).getString(i);
                boolean isRow = !verdict.isNull(i) && verdict.getByte(i) == 0;
                assertTrue(isRow == (reason == null), "a reason for each error row and only for them: " + row);
                rows.add(row.toString());
            }
        }
        assertEquals(to - from, rows.size(), "one row or error row per body");
        return rows;
    }

    private static String cell(ArrowColumn c, int i) {
        if (c.isNull(i)) {
            return "null";
        }
        switch (c.type) {
            case 'u':
                return '"' + c.getString(i) + '"';
            case 'l':
                return Long.toString(c.getLong(i));
            case 'g':
                return Double.toString(c.getDouble(i));
            case 'b':
                return Boolean.toString(c.getBoolean(i));
            case 'c':
                return Byte.toString(c.getByte(i));
            default:
                StringBuilder list = new StringBuilder("[");
                for (int j = c.start(i); j < c.end(i); j++) {
                    list.append(cell(c.child, j)).append(',');
                }
                return list.append(']').toString();
        }
    }

    /** The batch's rows, twice (the same), and each body's row alone (the same as in the batch). */
    private static List<String> checked(NativeParser parser, byte[][] bodies, int from, int to, boolean alone) {
        List<String> first = rows(parser, bodies, from, to);
        assertEquals(first, rows(parser, bodies, from, to), "a second call gives the same rows");
        if (alone) {
            for (int i = from; i < to; i++) {
                assertEquals(List.of(first.get(i - from)), rows(parser, bodies, i, i + 1), "body " + i + " alone");
            }
        }
        return first;
    }

    // -- tests ----------------------------------------------------------------------------------------------------

    @Test
    void mutatedBodiesInBatchesOfEverySize() {
        Random random = new Random(SEED);
        NativeParser parser = parser();
        int bodies = 0;
        java.util.Set<String> verdicts = new java.util.TreeSet<>();
        while (bodies < 3000) {
            byte[][] batch = new byte[random.nextInt(65)][];
            for (int i = 0; i < batch.length; i++) {
                batch[i] = random.nextInt(20) == 0 ? null : mutated(random); // null: read as an empty body
            }
            // a sub-range of the array, as the operator hands its buffer
            int from = batch.length == 0 ? 0 : random.nextInt(batch.length + 1);
            int to = from + (batch.length == from ? 0 : random.nextInt(batch.length - from + 1));
            for (String row : checked(parser, batch, from, to, true)) {
                verdicts.add(row.substring(row.indexOf("!verdict=")).split(";", 2)[0]);
            }
            bodies += to - from;
        }
        // the mutations reach rows and errors of several kinds (not just "not JSON")
        assertTrue(verdicts.contains("!verdict=0") && verdicts.size() >= 5, verdicts.toString());
    }

    @Test
    void largeDeepAndManyBodies() {
        Random random = new Random(SEED + 1);
        NativeParser parser = parser();
        List<byte[]> big = large(random);
        byte[][] batch = new byte[big.size() * 2][];
        for (int i = 0; i < big.size(); i++) {
            batch[2 * i] = big.get(i);
            batch[2 * i + 1] = SEEDS[0];
        }
        List<String> rows = checked(parser, batch, 0, batch.length, true);
        assertTrue(rows.get(0).contains("!verdict=0;"), rows.get(0).substring(0, 200));
        for (int i = 1; i < batch.length; i += 2) {
            assertEquals(rows.get(1), rows.get(i), "a valid body after a hostile one");
        }
        byte[][] many = new byte[20_000][];
        for (int i = 0; i < many.length; i++) {
            many[i] = i % 3 == 0 ? SEEDS[0] : i % 3 == 1 ? null : mutated(random);
        }
        checked(parser, many, 0, many.length, false);
    }

    @Test
    void zeroBodiesAndArraysAtTheirEdges() {
        NativeParser parser = parser();
        assertEquals(List.of(), checked(parser, new byte[0][], 0, 0, false));
        assertEquals(List.of(), checked(parser, new byte[][] {SEEDS[0]}, 1, 1, false));
        assertEquals(List.of(), checked(parser, null, 0, 0, false));
        byte[][] nulls = new byte[100][];
        List<String> rows = checked(parser, nulls, 0, nulls.length, false);
        assertEquals(rows.get(0), rows.get(99));
        assertEquals(List.of(rows.get(0)), rows(parser, new byte[][] {new byte[0]}, 0, 1), "null reads as empty");
        byte[][] two = {SEEDS[0], SEEDS[1]};
        assertThrows(IndexOutOfBoundsException.class, () -> parser.parse(two, 0, 3));
        assertThrows(IndexOutOfBoundsException.class, () -> parser.parse(two, -1, 1));
        // from > to reached the shim before: n = -1 wrote offsets[0] past a malloc(0) and was refused as "no bodies
        // given" (an IllegalStateException), n = -2 failed its malloc and came back as one "internal error" row
        assertThrows(IndexOutOfBoundsException.class, () -> parser.parse(two, 2, 1));
        assertThrows(IndexOutOfBoundsException.class, () -> parser.parse(two, 2, 0));
        assertThrows(IndexOutOfBoundsException.class, () -> parser.parse(null, 0, 1));
        assertEquals(2, rows(parser, two, 0, 2).size(), "the parser is usable after a refused call");
    }

    /** Plans as the core gets them from Java: random bytes, cuts and mutations of a valid one, other versions. */
    @Test
    void malformedPlans() {
        Random random = new Random(SEED + 2);
        byte[] valid = document.getBytes(StandardCharsets.UTF_8);
        byte[][] bodies = {SEEDS[0], null, SEEDS[1], mutated(random), SEEDS[3]};
        List<byte[]> plans = new ArrayList<>();
        plans.add(new byte[0]);
        plans.add(valid);
        for (int cut = 0; cut < valid.length; cut += 1 + valid.length / 300) {
            plans.add(Arrays.copyOf(valid, cut));
        }
        for (String version : new String[] {"1", "3", "-2", "2.0", "\"2\"", "null", "9223372036854775808", "[]"}) {
            String other = document.replaceFirst("\"version\":\\s*2", "\"version\": " + version);
            assertTrue(!other.equals(document), version);
            plans.add(other.getBytes(StandardCharsets.UTF_8));
        }
        for (int i = 0; i < 1500; i++) {
            byte[] plan = valid.clone();
            for (int s = 1 + random.nextInt(4); s > 0; s--) {
                plan[random.nextInt(plan.length)] = (byte) random.nextInt(256);
            }
            plans.add(plan);
        }
        for (int i = 0; i < 200; i++) {
            byte[] plan = new byte[random.nextInt(256)];
            random.nextBytes(plan);
            plans.add(plan);
        }
        int read = 0;
        for (byte[] plan : plans) {
            String first = outcome(plan, bodies);
            assertEquals(first, outcome(plan, bodies), "the same plan twice");
            read += first.startsWith("done") ? 1 : 0;
        }
        assertTrue(read >= 2, "some plans are read: " + read);
    }

    /** A plan's outcome: "done" and the columns' names and lengths, or its code and message (one line). */
    private static String outcome(byte[] plan, byte[][] bodies) {
        try (NativeCore.Result result = NativeCore.parse(plan, bodies, 0, bodies.length)) {
            if (result.code != CoreContract.DONE) {
                assertEquals(1, result.code, "a bad plan is DSPARK_BAD_PLAN: " + result.message);
                assertTrue(!result.message.isEmpty() && !result.message.contains("\n"), result.message);
                return result.code + " " + result.message;
            }
            StringBuilder out = new StringBuilder("done");
            for (Map.Entry<String, ArrowColumn> column : result.columns()) {
                assertEquals(bodies.length, column.getValue().length, column.getKey());
                out.append(' ').append(column.getKey());
            }
            return out.toString();
        }
    }

    /**
     * What the planner narrowed is what the core reads: the named columns of the plan, the core's own beside them;
     * a column a row would bind that the plan does not read is refused in one line, not read as NULL.
     */
    @Test
    void thePlannersNarrowedReadAndAColumnItLacks() throws Exception {
        NativeParser narrowed = new NativeParser(PythonPlan.of("openai", "id", "created"));
        assertEquals(List.of("id", "created"), narrowed.columns());
        byte[][] one = {VALID.getBytes(StandardCharsets.UTF_8)};
        Map<String, ArrowColumn> part = narrowed.parse(one, 0, 1).get(0);
        assertEquals("chatcmpl-7", part.get("id").getString(0));
        assertEquals(java.util.Set.of("id", "created", NativeParser.VERDICT, NativeParser.REASON, NativeParser.FIELD),
                part.keySet());
        narrowed.require(List.of("created", "id"));
        IllegalArgumentException refused =
                assertThrows(IllegalArgumentException.class, () -> narrowed.require(List.of("id", "model")));
        assertTrue(refused.getMessage().contains("[model]") && !refused.getMessage().contains("\n"),
                refused.getMessage());
    }

    /** A result closed twice, read after it is closed, and a refused one read: refused in Java, never freed twice. */
    @Test
    void resultsUsedAfterClose() {
        byte[] plan = document.getBytes(StandardCharsets.UTF_8);
        byte[][] bodies = {SEEDS[0], SEEDS[1]};
        for (int i = 0; i < 200; i++) {
            NativeCore.Result result = NativeCore.parse(plan, bodies, 0, bodies.length);
            assertEquals(CoreContract.DONE, result.code, result.message);
            assertEquals(bodies.length, result.columns().get(0).getValue().length);
            result.close();
            result.close();
            assertThrows(IllegalStateException.class, result::columns);
            try (NativeCore.Result refused = NativeCore.parse(new byte[] {'{'}, bodies, 0, bodies.length)) {
                assertEquals(1, refused.code);
                assertThrows(IllegalStateException.class, refused::columns);
            }
        }
        assertEquals(outcome(plan, bodies), outcome(plan, bodies));
    }

    @Test
    void severalThreadsAtOnce() throws Exception {
        Random random = new Random(SEED + 3);
        byte[][] bodies = new byte[400][];
        for (int i = 0; i < bodies.length; i++) {
            bodies[i] = mutated(random);
        }
        List<String> expected = rows(parser(), bodies, 0, bodies.length);
        byte[] badPlan = Arrays.copyOf(document.getBytes(StandardCharsets.UTF_8), 40);
        String refused = outcome(badPlan, bodies);
        ExecutorService pool = Executors.newFixedThreadPool(6);
        try {
            List<Future<?>> done = new ArrayList<>();
            for (int t = 0; t < 6; t++) {
                long seed = SEED + 10 + t;
                boolean bad = t == 5;
                done.add(pool.submit(() -> {
                    Random r = new Random(seed);
                    NativeParser own = parser(); // one per thread: a parser is not thread-safe
                    for (int k = 0; k < 60; k++) {
                        if (bad) {
                            assertEquals(refused, outcome(badPlan, bodies));
                            continue;
                        }
                        int from = r.nextInt(bodies.length);
                        int to = from + r.nextInt(bodies.length - from + 1);
                        assertEquals(expected.subList(from, to), rows(own, bodies, from, to));
                    }
                    return null;
                }));
            }
            for (Future<?> f : done) {
                assertNull(f.get(100, TimeUnit.SECONDS));
            }
        } finally {
            pool.shutdownNow();
        }
        assertNotNull(refused);
    }
}
