package io.dspark.vllm.store;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

import java.io.IOException;
import java.net.URLDecoder;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/**
 * A {@link ResponseStore} in a Kafka topic: {@code 'request.store' = 'kafka://host:9092[,host2:9092]/topic'}, with
 * Kafka client settings after a '?' ({@code ?security.protocol=SSL&ssl.truststore.location=...}). Each record's key
 * is the request key (32 bytes); its value is the same record as {@link FileSystemStore}'s (cache key, stored at,
 * status, received at, body, CRC). A topic that is not there is created (compacted and deleted after 7 days:
 * {@code cleanup.policy=compact,delete}, {@code retention.ms=604800000}; create it beforehand to choose otherwise).
 *
 * <p>Opening reads the topic once, every partition from its start (or from the positions a restored checkpoint
 * gave: {@link #KafkaStore(String, Map)}) to its end, and keeps an index of each key to (partition, offset, stored
 * at), never the bodies (about 150 bytes a response); a hit fetches its one record by offset. {@link #positions()}
 * is how far this store knows each partition (read at opening, or acknowledged since): a lower bound of the
 * partition's end, so every response put later lies at or after it. Compaction keeps the topic to one record a
 * key, retention to the time a job may be restored from.
 *
 * <p>A put is produced idempotently with {@code acks=all}, uncompressed, and completes when the broker acknowledged
 * it. Records compressed with lz4, snappy or zstd (a topic whose {@code compression.type} is one of those) cannot be
 * read: the jar carries kafka-clients without those codecs, so opening fails, said once, and requests are sent.
 */
public final class KafkaStore implements ResponseStore {
    static final String RETENTION_MS = String.valueOf(TimeUnit.DAYS.toMillis(7));

    private final String bootstrap;
    private final String topic;
    private final KafkaProducer<byte[], byte[]> producer;
    private final KafkaConsumer<byte[], byte[]> reader; // fetches a hit's record by offset; guarded by itself
    private final Map<ByteBuffer, long[]> index = new ConcurrentHashMap<>(); // key -> {partition, offset, stored at}
    private final Map<ByteBuffer, long[]> cacheIndex = new ConcurrentHashMap<>();
    private final Map<Integer, Long> known = new ConcurrentHashMap<>(); // partition -> an offset below its end
    private long read; // records read at opening
    private long damaged; // records of a request key read at opening too short to be a record
    private String firstDamaged;

    /**
     * Opens the topic of {@code uri} (creating it if missing) and indexes its records. kafka-clients loads the
     * classes its settings name through the thread's context class loader, which need not be the one that has them
     * (the jar's, in a job's user-code class loader), so they are made with this class's loader as the context.
     */
    public KafkaStore(String uri) throws IOException {
        this(uri, null);
    }

    /**
     * @param from where to start reading each partition (a restored checkpoint's positions; a partition missing
     *     from it, or an offset no longer in the log, from its start), or null for the whole topic
     */
    public KafkaStore(String uri, Map<Integer, Long> from) throws IOException {
        Thread thread = Thread.currentThread();
        ClassLoader was = thread.getContextClassLoader();
        thread.setContextClassLoader(KafkaStore.class.getClassLoader());
        try {
            String[] parts = parse(uri);
            bootstrap = parts[0];
            topic = parts[1];
            Properties common = new Properties();
            common.putAll(settings(uri));
            common.put("bootstrap.servers", bootstrap);
            // one of its own per opening: clients of one id in one JVM clash in JMX (a warning each)
            String id = java.util.UUID.randomUUID().toString().substring(0, 8);
            common.put("client.id", "dspark-vllm-store-" + topic + "-" + id);
            common.put("request.timeout.ms", String.valueOf(TIMEOUT.toMillis()));
            common.put("default.api.timeout.ms", String.valueOf(TIMEOUT.toMillis()));
            KafkaConsumer<byte[], byte[]>[] consumer = new KafkaConsumer[1];
            producer = open(common, consumer, from);
            reader = consumer[0];
        } finally {
            thread.setContextClassLoader(was);
        }
    }

    /** {bootstrap servers, topic} of {@code kafka://host:port[,host:port]/topic[?settings]}. */
    static String[] parse(String uri) throws IOException {
        String rest = uri.substring("kafka://".length()).split("\\?", 2)[0];
        int slash = rest.indexOf('/');
        if (slash <= 0 || slash == rest.length() - 1 || rest.indexOf('/', slash + 1) >= 0) {
            throw new IOException("'" + uri.split("\\?", 2)[0] + "' is not kafka://host:port[,host:port]/topic");
        }
        return new String[] {rest.substring(0, slash), rest.substring(slash + 1)};
    }

    /** The Kafka client settings after the '?' of {@code uri}. */
    static Map<String, String> settings(String uri) {
        Map<String, String> settings = new HashMap<>();
        int query = uri.indexOf('?');
        if (query >= 0) {
            for (String pair : uri.substring(query + 1).split("&")) {
                int eq = pair.indexOf('=');
                if (eq > 0) {
                    settings.put(decode(pair.substring(0, eq)), decode(pair.substring(eq + 1)));
                }
            }
        }
        return settings;
    }

    private KafkaProducer<byte[], byte[]> open(
            Properties common, KafkaConsumer<byte[], byte[]>[] opened, Map<Integer, Long> from) throws IOException {
        KafkaConsumer<byte[], byte[]> consumer = null;
        KafkaProducer<byte[], byte[]> made = null;
        try {
            Properties c = new Properties();
            c.putAll(common);
            c.put("enable.auto.commit", "false");
            c.put("allow.auto.create.topics", "false");
            c.put("max.poll.records", "2000");
            c.put("auto.offset.reset", "earliest"); // a position below the log's start (retention): from its start
            consumer = new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer());
            List<TopicPartition> partitions = partitions(consumer, common);
            readAll(consumer, partitions, from);
            Properties p = new Properties();
            p.putAll(common);
            p.put("acks", "all");
            p.put("enable.idempotence", "true");
            p.put("compression.type", "none");
            p.put("linger.ms", "5");
            p.put("max.block.ms", String.valueOf(TIMEOUT.toMillis()));
            p.put("delivery.timeout.ms", String.valueOf(3 * TIMEOUT.toMillis()));
            made = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
        } catch (RuntimeException | IOException | LinkageError e) { // LinkageError: a codec the jar lacks (lz4...)
            if (consumer != null) {
                consumer.close(Duration.ZERO);
            }
            if (made != null) {
                made.close(Duration.ZERO);
            }
            throw e instanceof IOException ? (IOException) e : new IOException(oneLine(e), e);
        }
        opened[0] = consumer;
        return made;
    }

    private static String decode(String s) {
        return URLDecoder.decode(s, StandardCharsets.UTF_8);
    }

    private static String oneLine(Throwable e) {
        String message = String.valueOf(e.getMessage()).split("\n", 2)[0];
        return e.getClass().getSimpleName() + ": " + message;
    }

    /** The topic's partitions; a topic that is not there is created first (compacted, 7 days). */
    private List<TopicPartition> partitions(KafkaConsumer<byte[], byte[]> consumer, Properties common)
            throws IOException {
        List<PartitionInfo> found = consumer.partitionsFor(topic, TIMEOUT);
        if (found == null || found.isEmpty()) {
            String why = null;
            try (Admin admin = Admin.create(common)) {
                Map<String, String> config = Map.of("cleanup.policy", "compact,delete", "retention.ms", RETENTION_MS);
                NewTopic made = new NewTopic(topic, Optional.empty(), Optional.empty()).configs(config);
                admin.createTopics(Collections.singleton(made)).all().get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            } catch (Exception e) {
                // another subtask (or store) made it first: TopicExistsException; else the looks below say
                why = oneLine(e.getCause() != null ? e.getCause() : e);
            }
            // A topic just made takes a moment to reach every broker's metadata.
            long deadline = System.nanoTime() + TIMEOUT.toNanos();
            while ((found == null || found.isEmpty()) && System.nanoTime() < deadline) {
                try {
                    Thread.sleep(100);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    break;
                }
                found = consumer.partitionsFor(topic, TIMEOUT);
            }
            if (found == null || found.isEmpty()) {
                throw new IOException("the topic '" + topic + "' is not there and could not be created"
                        + (why == null ? "" : " (" + why + ")"));
            }
        }
        List<TopicPartition> partitions = new ArrayList<>();
        for (PartitionInfo info : found) {
            partitions.add(new TopicPartition(topic, info.partition()));
        }
        return partitions;
    }

    /**
     * Indexes the records of the topic, each partition from {@code from}'s position (else its start) to the end it
     * had when opening began.
     */
    private void readAll(KafkaConsumer<byte[], byte[]> consumer, List<TopicPartition> partitions,
            Map<Integer, Long> from) throws IOException {
        Map<TopicPartition, Long> end = new HashMap<>(consumer.endOffsets(partitions, TIMEOUT));
        end.forEach((p, offset) -> known.put(p.partition(), offset));
        consumer.assign(partitions);
        consumer.seekToBeginning(partitions);
        if (from != null) {
            for (TopicPartition p : partitions) {
                Long at = from.get(p.partition());
                if (at != null && at > 0) {
                    consumer.seek(p, at);
                }
            }
        }
        end.entrySet().removeIf(e -> consumer.position(e.getKey(), TIMEOUT) >= e.getValue());
        long quietSince = System.nanoTime();
        while (!end.isEmpty()) {
            var records = consumer.poll(Duration.ofMillis(500));
            if (records.isEmpty()) {
                if (System.nanoTime() - quietSince > TIMEOUT.toNanos()) {
                    throw new IOException("reading the topic '" + topic + "' stalled before its end " + end);
                }
                continue;
            }
            quietSince = System.nanoTime();
            for (ConsumerRecord<byte[], byte[]> r : records) {
                add(r.key(), r.value(), r.partition(), r.offset());
                read++;
            }
            end.entrySet().removeIf(e -> consumer.position(e.getKey(), TIMEOUT) >= e.getValue());
        }
        consumer.assign(Collections.emptyList());
    }

    private void add(byte[] key, byte[] value, int partition, long offset) {
        if (key == null || key.length != FileSystemStore.KEY_BYTES) {
            return; // not ours
        }
        if (value == null) { // a tombstone: the key's response was deleted
            index.remove(ByteBuffer.wrap(key));
            return;
        }
        if (value.length < 8 + FileSystemStore.KEY_BYTES * 2 + 8) {
            if (damaged++ == 0) {
                firstDamaged = "the record at offset " + offset + " of " + topic + "-" + partition + " is cut short";
            }
            return;
        }
        long[] at = {partition, offset, FileSystemStore.storedAtOf(value)};
        index.put(ByteBuffer.wrap(key), at);
        newest(ByteBuffer.wrap(FileSystemStore.cacheKeyOf(value)), at);
    }

    private void newest(ByteBuffer cacheKey, long[] at) {
        cacheIndex.merge(cacheKey, at, (old, now) -> now[2] >= old[2] ? now : old);
    }

    @Override
    public Damaged damagedAtOpening() {
        return damaged == 0 ? null : new Damaged(
                damaged == 1 ? firstDamaged : damaged + " records at opening, the first: " + firstDamaged, damaged);
    }

    /** Records read at opening. */
    public long recordsRead() {
        return read;
    }

    /**
     * How far this store knows each partition (partition -> offset): the end read at opening or the offset after
     * a record acknowledged since, whichever is further. Below or at each partition's end: a response put from now
     * on lies at or after it.
     */
    public Map<Integer, Long> positions() {
        return new HashMap<>(known);
    }

    /** Responses indexed (read at opening and put since). */
    public int size() {
        return index.size();
    }

    @Override
    public String where() {
        return "kafka://" + bootstrap + "/" + topic;
    }

    @Override
    public Stored lookup(byte[] key) throws IOException {
        long[] at = index.get(ByteBuffer.wrap(key));
        return at == null ? null : read(at, key);
    }

    @Override
    public Stored lookupCache(byte[] cacheKey, long notBeforeMs) throws IOException {
        long[] at = cacheIndex.get(ByteBuffer.wrap(cacheKey));
        return at == null || at[2] < notBeforeMs ? null : read(at, null);
    }

    /** The record at {at}'s offset, or null when it is gone (compacted away or past retention): sent again. */
    private Stored read(long[] at, byte[] key) throws IOException {
        TopicPartition partition = new TopicPartition(topic, (int) at[0]);
        String what = "the record at offset " + at[1] + " of " + partition;
        synchronized (reader) {
            try {
                reader.assign(Collections.singleton(partition));
                reader.seek(partition, at[1]);
                long deadline = System.nanoTime() + TIMEOUT.toNanos();
                while (System.nanoTime() < deadline) {
                    for (ConsumerRecord<byte[], byte[]> r : reader.poll(Duration.ofMillis(200))) {
                        if (r.offset() != at[1] || r.value() == null
                                || (key != null && !java.util.Arrays.equals(key, r.key()))) {
                            return null;
                        }
                        return FileSystemStore.decode(r.value(), what);
                    }
                    if (reader.position(partition, TIMEOUT) > at[1]) {
                        return null; // the offset is below the log's start now
                    }
                }
            } catch (RuntimeException | LinkageError e) {
                throw new IOException(oneLine(e), e);
            }
        }
        throw new IOException(what + " did not come within " + TIMEOUT.toSeconds() + " s");
    }

    @Override
    public CompletableFuture<Void> put(byte[] key, byte[] cacheKey, Stored response) {
        CompletableFuture<Void> done = new CompletableFuture<>();
        byte[] value = FileSystemStore.record(key, cacheKey, response);
        try {
            producer.send(new ProducerRecord<>(topic, key, value), (metadata, e) -> {
                if (e != null) {
                    done.completeExceptionally(e);
                    return;
                }
                long[] at = {metadata.partition(), metadata.offset(), response.storedAtMs};
                known.merge(metadata.partition(), metadata.offset() + 1, Math::max);
                index.put(ByteBuffer.wrap(key), at);
                newest(ByteBuffer.wrap(cacheKey), at);
                done.complete(null);
            });
        } catch (RuntimeException e) { // no metadata within max.block.ms, a record over max.request.size, closed
            done.completeExceptionally(e);
        }
        return done;
    }

    @Override
    public void close() {
        producer.close(TIMEOUT);
        synchronized (reader) {
            reader.close(Duration.ZERO);
        }
    }
}
