package io.dspark.vllm.sql;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** No secret in a line the SQL runner prints ({@link Secrets#mask}). */
final class SecretsTest {

    @Test
    void aStoresQueryAndAnApiKeyAreMaskedInFlinksOptionListsAndInStatements() {
        String flink = "Unable to create a source for reading table 'default_catalog.default_database.t'.\n\n"
                + "Table options are:\n\n'api-key'='sk-1'\n'connector'='dspark-vllm'\n"
                + "'request.store'='kafka://b:9092/answers?sasl.jaas.config=x%20password%3D%22sk-2%22'\n";
        String masked = Secrets.mask(flink);
        assertFalse(masked.contains("sk-1") || masked.contains("sk-2"), masked);
        assertTrue(masked.contains("'api-key'='******'"), masked);
        assertTrue(masked.contains("'request.store'='kafka://b:9092/answers?******'"), masked);
        assertTrue(masked.contains("'connector'='dspark-vllm'"), masked);

        String sql = "CREATE TABLE t (x STRING) WITH ('api-key' = 'sk-''3', 'request.store' = "
                + "'s3://bucket/answers?token=sk-4', 'model' = 'm')";
        String shown = Secrets.mask(sql);
        assertFalse(shown.contains("sk-") || shown.contains("token"), shown);
        assertTrue(shown.contains("'api-key' = '******'") && shown.contains("'model' = 'm'"), shown);
        // SHOW CREATE MODEL writes the options one a line, as `'key' = 'value'`
        assertEquals("  'api-key' = '******',", Secrets.mask("  'api-key' = 'sk-5',"));
        // a Kafka store's URI anywhere in a message (a store that cannot be opened, a stack trace)
        assertEquals("no store at kafka://b:9092/t?****** (timeout)",
                Secrets.mask("no store at kafka://b:9092/t?sasl.jaas.config=pw%3Dsk-6 (timeout)"));
        assertEquals("'endpoint'='http://******@127.0.0.1:9'", Secrets.mask("'endpoint'='http://u:sk-7@127.0.0.1:9'"));
        // EXPLAIN's hints: a map
        assertEquals("hints=[[[OPTIONS options:{api-key=******, request.store=kafka://b:9092/t?******}]]])",
                Secrets.mask("hints=[[[OPTIONS options:{api-key=sk-8, request.store=kafka://b:9092/t?pw=sk-9}]]])"));
        assertEquals("nothing secret here", Secrets.mask("nothing secret here"));
    }
}
