package io.dspark.vllm.parse;

import io.dspark.vllm.plan.Plan;
import io.dspark.vllm.plan.PlanReader;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * What the Python planner makes the native core read ({@code connector.plan.parse.native_read}) for core columns
 * of a profile (every column it makes when none are named), made by the Python named by {@code -Ddspark.python}
 * (java/build_jar.py passes its own): the plan the JUnit tests of the parse step and of the JNI boundary give the
 * core.
 */
public final class PythonPlan {

    private PythonPlan() {}

    public static Plan.NativeRead of(String profile, String... columns) throws IOException, InterruptedException {
        String python = System.getProperty("dspark.python", "python3");
        List<String> command = new ArrayList<>(List.of(python, "-c", String.join("\n",
                "import json, sys",
                "from connector.plan.parse import made_columns, native_read",
                "from connector.plan.records import to_json",
                "from connector.profiles import load_profile",
                "p = load_profile(sys.argv[1])",
                "print(json.dumps(to_json(native_read(p, sys.argv[2:] or made_columns(p)))))"),
                profile));
        command.addAll(List.of(columns));
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        try (InputStream in = p.getInputStream()) {
            in.transferTo(out);
        }
        String answer = out.toString(StandardCharsets.UTF_8);
        if (!p.waitFor(60, TimeUnit.SECONDS) || p.exitValue() != 0) {
            p.destroyForcibly();
            throw new IOException("the Python planner gave no plan for '" + profile + "': " + answer);
        }
        return PlanReader.readNativeRead(new ObjectMapper().readTree(answer));
    }

    /** A NativeRead the planner wrote to {@code file} (the Python drivers of NativeCheck, NativeBench...). */
    public static Plan.NativeRead read(Path file) throws IOException {
        return PlanReader.readNativeRead(new ObjectMapper().readTree(Files.readAllBytes(file)));
    }
}
