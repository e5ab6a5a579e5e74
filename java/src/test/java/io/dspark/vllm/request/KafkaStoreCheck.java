package io.dspark.vllm.request;

import io.dspark.vllm.store.StoredRequests;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static io.dspark.vllm.request.Servers.OK_BODY;
import static io.dspark.vllm.request.Servers.Web;
import static io.dspark.vllm.request.Servers.of;
import static io.dspark.vllm.request.Servers.respond;
import static io.dspark.vllm.request.Servers.spec;

/**
 * The Kafka store's failures as the folder store's (tests/test_flink_store.py, on the `kafka` fixture's real
 * broker; the JUnit tests have no broker): a damaged record in the topic (a CRC that does not match, found by a
 * lookup; a record cut short, left out at opening) is skipped (its request sent, counted, one line) while the other
 * records still answer; a put that fails (a record over the producer's
 * {@code max.request.size}, set after the URI's '?') is one line and counted, and the row is answered. No line
 * holds what follows the '?'. Prints one line per check; exits 1 at the first that fails.
 *
 * <pre>java ... io.dspark.vllm.request.KafkaStoreCheck BOOTSTRAP TOPIC_PREFIX</pre>
 */
public final class KafkaStoreCheck {
    private static final String SECRET = "s3cret-canary";

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String prefix = args[1];
        try (Web web = new Web((x, s) -> respond(x, 200,
                new String(s.body, StandardCharsets.UTF_8).contains("long") ? longBody() : OK_BODY))) {
            damagedRecord(web, "kafka://" + bootstrap + "/" + prefix + "-damaged?ssl.key.password=" + SECRET, bootstrap,
                    prefix + "-damaged");
            failedPut(web, "kafka://" + bootstrap + "/" + prefix + "-put?max.request.size=4096&ssl.key.password="
                    + SECRET);
        }
        System.out.println("ok");
    }

    private static void damagedRecord(Web web, String uri, String bootstrap, String topic) throws Exception {
        String key1;
        try (StoredRequests first = new StoredRequests(new Requester(of(spec(web.base))), uri, 0, 0)) {
            List<String> keys = new ArrayList<>();
            for (int i = 0; i < 4; i++) {
                StoredRequests.Answer a = first.send("question", "row-" + i).get(60, TimeUnit.SECONDS);
                check(a.outcome.ok() && !a.cached, "a first answer: " + a.outcome.error);
                keys.add(a.key);
            }
            check(first.stored() == 4, "4 stored, not " + first.stored());
            key1 = keys.get(1);
        }
        // row-1's key gets a damaged record (its CRC does not match) after its whole one: the index takes the newest
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(
                Map.of("bootstrap.servers", bootstrap), new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.send(new ProducerRecord<>(topic, unhex(key1), damaged())).get(60, TimeUnit.SECONDS);
            // and a key's record too short to be one: left out at opening
            producer.send(new ProducerRecord<>(topic, new byte[32], new byte[10])).get(60, TimeUnit.SECONDS);
        }
        List<String> lines = new ArrayList<>();
        StoredRequests[] opened = new StoredRequests[1];
        lines.addAll(stderrOf(() -> opened[0] = new StoredRequests(new Requester(of(spec(web.base))), uri, 0, 0)));
        try (StoredRequests again = opened[0]) {
            boolean[] cached = new boolean[4];
            lines.addAll(stderrOf(() -> {
                for (int i = 0; i < 4; i++) {
                    StoredRequests.Answer a = again.send("question", "row-" + i).get(60, TimeUnit.SECONDS);
                    check(a.outcome.ok(), "an answer: " + a.outcome.error);
                    cached[i] = a.cached;
                }
            }));
            check(cached[0] && !cached[1] && cached[2] && cached[3],
                    "rows 0, 2, 3 from the store, row 1 sent: " + java.util.Arrays.toString(cached));
            check(again.answeredFromStore() == 3, "3 answered from the store, not " + again.answeredFromStore());
            check(again.storeFailures() == 2, "2 damaged records counted, not " + again.storeFailures());
            check(again.stored() == 1, "row 1's answer kept again, not " + again.stored());
        }
        checkLines(lines, "holds a damaged record (the record at offset 5 of " + topic + "-0 is cut short)");
        System.out.println("damaged record: " + lines.get(0));
    }

    private static void failedPut(Web web, String uri) throws Exception {
        List<String> lines = new ArrayList<>();
        try (StoredRequests requests = new StoredRequests(new Requester(of(spec(web.base))), uri, 0, 0)) {
            lines.addAll(stderrOf(() -> {
                String[] prompts = {"short", "long", "short"};
                for (int i = 0; i < prompts.length; i++) {
                    StoredRequests.Answer a = requests.send(prompts[i], "row-" + i).get(60, TimeUnit.SECONDS);
                    check(a.outcome.ok() && !a.cached, "an answer: " + a.outcome.error);
                }
            }));
            // the first kept; the second's put failed (said, counted); the third went without the store (the pause)
            check(requests.stored() == 1, "1 stored, not " + requests.stored());
            check(requests.storeFailures() == 1, "1 store failure (the put), not " + requests.storeFailures());
        }
        checkLines(lines, "cannot be written");
        System.out.println("failed put: " + lines.get(0));
    }

    /** One line of ours, saying {@code what}, without the URI's settings. */
    private static void checkLines(List<String> lines, String what) {
        List<String> ours = new ArrayList<>();
        for (String line : lines) {
            check(!line.contains(SECRET), "a line holds what follows the URI's '?': " + line);
            if (line.startsWith("dspark-vllm:")) {
                ours.add(line);
            }
        }
        check(ours.size() == 1, "one line, not " + ours);
        check(ours.get(0).contains(what), "the line says '" + what + "': " + ours.get(0));
        lines.retainAll(ours);
    }

    /** A record of the store's layout whose CRC does not match. */
    private static byte[] damaged() {
        int fixed = 32 * 2 + 8 + 4 + 8 + 4;
        byte[] body = OK_BODY.getBytes(StandardCharsets.UTF_8);
        ByteBuffer b = ByteBuffer.allocate(8 + fixed + body.length + 4);
        b.putInt(0x44535231).putInt(fixed + body.length).put(new byte[64]).putLong(1).putInt(200).putLong(1)
                .putInt(body.length).put(body).putInt(12345);
        return b.array();
    }

    private static String longBody() {
        return OK_BODY.replace("\"hi\"", "\"" + "long ".repeat(2000) + "\"");
    }

    private static byte[] unhex(String hex) {
        byte[] out = new byte[hex.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
        }
        return out;
    }

    interface Work {
        void run() throws Exception;
    }

    private static List<String> stderrOf(Work work) throws Exception {
        PrintStream err = System.err;
        ByteArrayOutputStream said = new ByteArrayOutputStream();
        System.setErr(new PrintStream(said, true, "UTF-8"));
        try {
            work.run();
        } finally {
            System.setErr(err);
        }
        String text = said.toString("UTF-8");
        System.err.print(text);
        return text.isEmpty() ? new ArrayList<>() : new ArrayList<>(List.of(text.split("\n")));
    }

    private static void check(boolean ok, String what) {
        if (!ok) {
            System.out.println("FAILED: " + what);
            System.out.flush();
            System.exit(1);
        }
    }
}
