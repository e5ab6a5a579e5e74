package io.dspark.vllm.sql;

import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.file.src.FileSourceSplit;
import org.apache.flink.connector.file.src.impl.StreamFormatAdapter;
import org.apache.flink.connector.file.src.reader.BulkFormat;
import org.apache.flink.connector.file.src.reader.SimpleStreamFormat;
import org.apache.flink.connector.file.src.reader.StreamFormat;
import org.apache.flink.connector.file.src.util.RecordAndPosition;
import org.apache.flink.core.fs.FSDataInputStream;
import org.apache.flink.core.fs.Path;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.types.logical.BigIntType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;
import org.apache.flink.table.types.logical.VarBinaryType;
import org.apache.flink.table.types.logical.VarCharType;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;

/**
 * The lines of files, for Flink's {@code FileSource}: each line with its file and its line number, as a row of
 * the pipeline's internal columns. Replay: {@code (_body BYTES, _source STRING, _source_line BIGINT)}; prompts: {@code (_prompt STRING,
 * _request_id STRING)}, the request id made of the file, the line number and the line ({@link #requestId}).
 *
 * <p>A line is what Flink's filesystem connector with the 'raw' format made a record of (the internal source
 * before this class: {@code DeserializationSchemaAdapter.LineBytesInputFormat}): the bytes up to a {@code \n},
 * less one {@code \r} before it; an empty line is a record (an empty body or prompt); the last line needs no
 * {@code \n}; a file ending in {@code \n} has no empty last record; compressed files (.gz, ...) are read through
 * their codec. Unlike that connector, a file is not split between readers: the line numbers are counted from
 * its start by one reader. After a restore, Flink's adapter for a format without positions of its own
 * ({@link StreamFormatAdapter}) reads the file again from its start and skips the records already emitted
 * (the checkpoint holds their count), so each line gets the same number again.
 */
final class FileLines implements BulkFormat<RowData, FileSourceSplit> {
    private static final long serialVersionUID = 1L;

    private static final LogicalType STRING = new VarCharType(VarCharType.MAX_LENGTH);
    /** Replay mode's rows: the body, its file and its line there (the one count of a file's lines). */
    static final RowType BODIES =
            RowType.of(new LogicalType[] {new VarBinaryType(VarBinaryType.MAX_LENGTH), STRING, new BigIntType()},
                    new String[] {"_body", "_source", "_source_line"});
    /** Request mode's rows: the prompt and its request id (the first two of contract.REQUEST_COLUMNS). */
    static final RowType PROMPTS = RowType.of(new LogicalType[] {STRING, STRING}, new String[] {"_prompt", "_request_id"});

    private final boolean prompts;
    private final StreamFormatAdapter<byte[]> lines = new StreamFormatAdapter<>(new Lines());

    private FileLines(boolean prompts) {
        this.prompts = prompts;
    }

    /** Replay: {@code (_body, _source, _source_line)}. */
    static FileLines bodies() {
        return new FileLines(false);
    }

    /** Prompts: {@code (_prompt, _request_id)}. */
    static FileLines prompts() {
        return new FileLines(true);
    }

    @Override
    public Reader<RowData> createReader(Configuration config, FileSourceSplit split) throws IOException {
        return new Rows(lines.createReader(config, split), split.path(), prompts);
    }

    @Override
    public Reader<RowData> restoreReader(Configuration config, FileSourceSplit split) throws IOException {
        return new Rows(lines.restoreReader(config, split), split.path(), prompts);
    }

    @Override
    public boolean isSplittable() {
        return false;
    }

    @Override
    public TypeInformation<RowData> getProducedType() {
        return InternalTypeInfo.of(prompts ? PROMPTS : BODIES);
    }

    /**
     * The request id of a prompt read from a file: the hex MD5 of {@code <file>\n<line number>\n<line>} (UTF-8),
     * the file as {@link #fileName} writes it, the line number counted from 1. Deterministic: the same after a
     * restore or a rescale; two identical lines are two ids. The one rule: the tests' copy (tests/request_ids.py),
     * which tells which ids a run should show, is held to it by the vectors in tests/data/request_ids.json.
     */
    static String requestId(String file, long lineNumber, String line) {
        MessageDigest md5;
        try {
            md5 = MessageDigest.getInstance("MD5");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e); // every JDK has MD5
        }
        byte[] digest = md5.digest((file + "\n" + lineNumber + "\n" + line).getBytes(StandardCharsets.UTF_8));
        StringBuilder hex = new StringBuilder(32);
        for (byte b : digest) {
            hex.append(Character.forDigit((b >> 4) & 0xF, 16)).append(Character.forDigit(b & 0xF, 16));
        }
        return hex.toString();
    }

    /**
     * A file as a request id names it: a local file by its absolute path
     * ({@code /data/prompts.txt}, without {@code file:}), any other by its URI ({@code s3://bucket/prompts.txt}).
     */
    static String fileName(Path path) {
        java.net.URI uri = path.toUri();
        if (uri.getScheme() == null || "file".equals(uri.getScheme())) {
            return uri.getPath();
        }
        return path.toString();
    }

    /** The lines' reader with each line made a row. */
    private static final class Rows implements Reader<RowData> {
        private final Reader<byte[]> lines;
        private final String file;
        private final StringData fileData;
        private final boolean prompts;

        Rows(Reader<byte[]> lines, Path path, boolean prompts) {
            this.lines = lines;
            this.file = fileName(path);
            // source.path as the filesystem connector's 'file.path' gave it: the path part of the file's URI
            this.fileData = StringData.fromString(path.getPath());
            this.prompts = prompts;
        }

        @Override
        public RecordIterator<RowData> readBatch() throws IOException {
            RecordIterator<byte[]> batch = lines.readBatch();
            if (batch == null) {
                return null;
            }
            return new RecordIterator<RowData>() {
                @Override
                public RecordAndPosition<RowData> next() {
                    RecordAndPosition<byte[]> line = batch.next();
                    if (line == null) {
                        return null;
                    }
                    // The adapter counts the records from the file's start (no offsets: the format has none),
                    // the line itself included: that count is its line number, the same after a restore.
                    long number = line.getRecordSkipCount();
                    return new RecordAndPosition<>(row(line.getRecord(), number), line.getOffset(), number);
                }

                @Override
                public void releaseBatch() {
                    batch.releaseBatch();
                }
            };
        }

        private RowData row(byte[] bytes, long number) {
            if (!prompts) {
                return GenericRowData.of(bytes, fileData, number);
            }
            String line = new String(bytes, StandardCharsets.UTF_8);
            return GenericRowData.of(StringData.fromString(line), StringData.fromString(requestId(file, number, line)));
        }

        @Override
        public void close() throws IOException {
            lines.close();
        }
    }

    /** The lines of one file, as bytes: up to a {@code \n}, less one {@code \r} before it. */
    static final class Lines extends SimpleStreamFormat<byte[]> {
        private static final long serialVersionUID = 1L;

        @Override
        public StreamFormat.Reader<byte[]> createReader(Configuration config, FSDataInputStream stream) {
            return new LineReader(stream);
        }

        @Override
        public TypeInformation<byte[]> getProducedType() {
            return PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO;
        }
    }

    private static final class LineReader implements StreamFormat.Reader<byte[]> {
        private final FSDataInputStream stream;
        private final byte[] buffer = new byte[64 * 1024];
        private int position;
        private int limit;
        private boolean end;

        LineReader(FSDataInputStream stream) {
            this.stream = stream;
        }

        @Override
        public byte[] read() throws IOException {
            byte[] line = null; // the bytes of this line from earlier buffers
            int length = 0;
            while (true) {
                if (position == limit) {
                    if (end || !fill()) {
                        end = true;
                        return line == null ? null : trimmed(line, length);
                    }
                }
                int start = position;
                while (position < limit && buffer[position] != '\n') {
                    position++;
                }
                int taken = position - start;
                if (line == null) {
                    line = new byte[Math.max(taken, 16)];
                } else if (length + taken > line.length) {
                    line = Arrays.copyOf(line, Math.max(line.length * 2, length + taken));
                }
                System.arraycopy(buffer, start, line, length, taken);
                length += taken;
                if (position < limit) { // at the '\n'
                    position++;
                    return trimmed(line, length);
                }
            }
        }

        private boolean fill() throws IOException {
            int read = stream.read(buffer, 0, buffer.length);
            if (read <= 0) {
                return false;
            }
            position = 0;
            limit = read;
            return true;
        }

        private static byte[] trimmed(byte[] line, int length) {
            if (length > 0 && line[length - 1] == '\r') {
                length--;
            }
            return line.length == length ? line : Arrays.copyOf(line, length);
        }

        @Override
        public void close() throws IOException {
            stream.close();
        }
    }
}
