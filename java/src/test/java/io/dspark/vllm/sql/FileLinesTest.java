package io.dspark.vllm.sql;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.file.src.FileSourceSplit;
import org.apache.flink.connector.file.src.reader.BulkFormat;
import org.apache.flink.connector.file.src.util.CheckpointedPosition;
import org.apache.flink.connector.file.src.util.RecordAndPosition;
import org.apache.flink.core.fs.Path;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.table.data.RowData;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The file source's format ({@link FileLines}): the lines as Flink's filesystem connector with the 'raw' format
 * read them, each with its file and line number, and a reader restored from a position taken mid-file (as
 * Flink's file source reader checkpoints it: the last emitted record's offset and count) going on at the next
 * line with the same numbers and request ids as a reading from the start.
 */
@Timeout(60)
final class FileLinesTest {

    @TempDir
    File folder;

    /** One row of the reading: its columns and the position the reader reported with it. */
    private static final class Read {
        final RowData row;
        final long offset;
        final long count;

        Read(RowData row, long offset, long count) {
            this.row = row;
            this.offset = offset;
            this.count = count;
        }
    }

    private static List<Read> readAll(BulkFormat.Reader<RowData> reader) throws Exception {
        List<Read> rows = new ArrayList<>();
        for (BulkFormat.RecordIterator<RowData> batch; (batch = reader.readBatch()) != null; ) {
            for (RecordAndPosition<RowData> r; (r = batch.next()) != null; ) {
                rows.add(new Read(r.getRecord(), r.getOffset(), r.getRecordSkipCount()));
            }
            batch.releaseBatch();
        }
        reader.close();
        return rows;
    }

    private FileSourceSplit split(File file) {
        return new FileSourceSplit("0", new Path(file.getPath()), 0, file.length(), file.lastModified(), file.length());
    }

    private File write(String name, byte[] bytes) throws Exception {
        File file = new File(folder, name);
        Files.write(file.toPath(), bytes);
        return file;
    }

    @Test
    void linesAreWhatTheRawFormatMadeRecordsOf() throws Exception {
        File file = write("bodies.jsonl", "a\nb\r\n\n{\"x\":1}\r\nlast".getBytes(StandardCharsets.UTF_8));
        List<Read> rows = readAll(FileLines.bodies().createReader(new Configuration(), split(file)));
        List<String> bodies = new ArrayList<>();
        for (Read r : rows) {
            bodies.add(new String(r.row.getBinary(0), StandardCharsets.UTF_8));
            assertEquals(file.getAbsolutePath(), r.row.getString(1).toString()); // source.path
        }
        // an empty line is a record, one \r before a \n goes, the last line needs no \n
        assertEquals(Arrays.asList("a", "b", "", "{\"x\":1}", "last"), bodies);
        File ended = write("ended.jsonl", "a\n\nb\n".getBytes(StandardCharsets.UTF_8));
        assertEquals(3, readAll(FileLines.bodies().createReader(new Configuration(), split(ended))).size());
        File empty = write("empty.jsonl", new byte[0]);
        assertEquals(0, readAll(FileLines.bodies().createReader(new Configuration(), split(empty))).size());
    }

    /**
     * The shared vectors (tests/data/request_ids.json): the ids the tests' copy of the rule (tests/request_ids.py,
     * held to the same file) expects a job to show.
     */
    @Test
    void aPromptsRequestIdIsTheSharedVectors() throws Exception {
        java.nio.file.Path vectors = null;
        for (java.nio.file.Path dir = java.nio.file.Path.of("").toAbsolutePath(); dir != null && vectors == null;
                dir = dir.getParent()) {
            java.nio.file.Path candidate = dir.resolve("tests").resolve("data").resolve("request_ids.json");
            vectors = Files.isRegularFile(candidate) ? candidate : null;
        }
        assertNotNull(vectors, "tests/data/request_ids.json not found above the working directory");
        JsonNode cases = new ObjectMapper().readTree(vectors.toFile()).get("cases");
        assertTrue(cases.size() >= 5);
        for (JsonNode c : cases) {
            String file = FileLines.fileName(new Path(c.get("path").asText()));
            assertEquals(c.get("id").asText(),
                    FileLines.requestId(file, c.get("line_number").asLong(), c.get("line").asText()), c.toString());
        }
    }

    @Test
    void aPromptsRequestIdIsItsFileLineNumberAndLine() throws Exception {
        File file = write("prompts.txt", "same\nsame\n".getBytes(StandardCharsets.UTF_8));
        List<Read> rows = readAll(FileLines.prompts().createReader(new Configuration(), split(file)));
        assertEquals(2, rows.size());
        for (int i = 0; i < 2; i++) {
            assertEquals("same", rows.get(i).row.getString(0).toString());
            assertEquals(FileLines.requestId(file.getAbsolutePath(), i + 1, "same"), rows.get(i).row.getString(1).toString());
        }
        // two identical lines: two requests
        assertEquals(false, rows.get(0).row.getString(1).equals(rows.get(1).row.getString(1)));
    }

    @Test
    void aRestoredReaderGoesOnAtTheNextLineWithTheSameNumbers() throws Exception {
        // Lines long and short over several of the adapter's batches (1 MiB reads) and this reader's buffers.
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        int lines = 30_000;
        for (int i = 0; i < lines; i++) {
            bytes.write(("Prompt " + i + (i % 1000 == 7 ? " " + "x".repeat(100_000) : "") + "\n")
                    .getBytes(StandardCharsets.UTF_8));
        }
        File file = write("prompts.txt", bytes.toByteArray());
        List<Read> all = readAll(FileLines.prompts().createReader(new Configuration(), split(file)));
        assertEquals(lines, all.size());
        for (int i = 0; i < lines; i++) {
            assertEquals(i + 1, all.get(i).count); // the line number, counted by the adapter
        }
        for (int at : new int[] {0, 1, 7, 8, 12_345, lines - 1}) {
            Read last = all.get(at); // the last row emitted before the checkpoint
            FileSourceSplit restored =
                    split(file).updateWithCheckpointedPosition(new CheckpointedPosition(last.offset, last.count));
            List<Read> rest = readAll(FileLines.prompts().restoreReader(new Configuration(), restored));
            assertEquals(lines - at - 1, rest.size(), "restored after line " + (at + 1));
            for (int i = 0; i < rest.size(); i++) {
                Read expected = all.get(at + 1 + i);
                assertEquals(expected.row.getString(0), rest.get(i).row.getString(0));
                assertEquals(expected.row.getString(1), rest.get(i).row.getString(1));
                assertEquals(expected.count, rest.get(i).count);
            }
        }
    }

    @Test
    void aReplayedBodyCarriesItsLineInItsFileAlsoAfterARestore() throws Exception {
        StringBuilder text = new StringBuilder();
        for (int i = 1; i <= 5000; i++) {
            text.append("{\"id\": \"").append(i).append("\"}\n");
        }
        File file = write("bodies.jsonl", text.toString().getBytes(StandardCharsets.UTF_8));
        List<Read> all = readAll(FileLines.bodies().createReader(new Configuration(), split(file)));
        for (int i = 0; i < all.size(); i++) {
            assertEquals(i + 1, all.get(i).row.getLong(2)); // _source_line
        }
        Read last = all.get(2999);
        FileSourceSplit restored =
                split(file).updateWithCheckpointedPosition(new CheckpointedPosition(last.offset, last.count));
        List<Read> rest = readAll(FileLines.bodies().restoreReader(new Configuration(), restored));
        // the parse step counted a file's lines itself, from 1 again after a restore
        assertEquals(3001, rest.get(0).row.getLong(2));
        assertEquals(5000, rest.get(rest.size() - 1).row.getLong(2));
    }

    @Test
    void aRateSourcesNumberReplacesEveryNInItsTemplate() {
        RowData row = new Sources.Numbered("it's {n} of {n}", "t").map(42L);
        assertEquals("it's 42 of 42", row.getString(0).toString());
        assertEquals("t-42", row.getString(1).toString());
    }
}
