import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.mirror.MirrorClient;
import org.apache.kafka.connect.mirror.MirrorClientConfig;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

/**
 * What MirrorMaker 2's own client reads from one cluster, as one JSON document on stdout.
 *
 * <p>Usage: {@code Mm2ClientProbe BOOTSTRAP default|identity SOURCE_ALIAS [GROUP ...]}. The test suite compiles
 * and runs it against clusters srm replicates into, and compares its answers with srm's own client.
 */
public final class Mm2ClientProbe {
    private static final Duration TIMEOUT = Duration.ofSeconds(30);

    private Mm2ClientProbe() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: Mm2ClientProbe BOOTSTRAP default|identity SOURCE_ALIAS [GROUP ...]");
            System.exit(2);
        }
        String bootstrap = args[0];
        String policy = switch (args[1]) {
            case "default" -> "org.apache.kafka.connect.mirror.DefaultReplicationPolicy";
            case "identity" -> "org.apache.kafka.connect.mirror.IdentityReplicationPolicy";
            default -> throw new IllegalArgumentException("policy must be default or identity: " + args[1]);
        };
        String source = args[2];
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", bootstrap);
        props.put(MirrorClientConfig.REPLICATION_POLICY_CLASS, policy);

        StringBuilder out = new StringBuilder("{");
        try (MirrorClient client = new MirrorClient(props)) {
            TreeSet<String> upstream = new TreeSet<>(client.upstreamClusters());
            field(out, "upstreamClusters", strings(upstream));
            List<String> hops = new ArrayList<>();
            for (String alias : upstream) {
                hops.add(quote(alias) + ":" + client.replicationHops(alias));
            }
            field(out, "replicationHops", "{" + String.join(",", hops) + "}");
            field(out, "heartbeatTopics", strings(client.heartbeatTopics()));
            field(out, "checkpointTopics", strings(client.checkpointTopics()));
            field(out, "remoteTopics", strings(client.remoteTopics()));
            field(out, "remoteTopicsOfSource", strings(client.remoteTopics(source)));
            List<String> translated = new ArrayList<>();
            List<String> remote = new ArrayList<>();
            for (int i = 3; i < args.length; i++) {
                String group = args[i];
                translated.add(quote(group) + ":" + offsets(RemoteClusterUtils.translateOffsets(props, source, group, TIMEOUT)));
                remote.add(quote(group) + ":" + offsets(client.remoteConsumerOffsets(group, source, TIMEOUT)));
            }
            field(out, "translateOffsets", "{" + String.join(",", translated) + "}");
            field(out, "remoteConsumerOffsets", "{" + String.join(",", remote) + "}");
        }
        out.setLength(out.length() - 1);  // the last field's comma
        out.append("}");
        System.out.println(out);
    }

    private static void field(StringBuilder out, String name, String json) {
        out.append(quote(name)).append(':').append(json).append(',');
    }

    /** Topic-partitions as [topic, partition, offset] triples, sorted. */
    private static String offsets(Map<TopicPartition, OffsetAndMetadata> offsets) {
        TreeSet<String> rows = new TreeSet<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
            rows.add("[" + quote(e.getKey().topic()) + "," + e.getKey().partition() + "," + e.getValue().offset() + "]");
        }
        return "[" + String.join(",", rows) + "]";
    }

    private static String strings(Collection<String> values) {
        List<String> quoted = new ArrayList<>();
        for (String v : new TreeSet<>(values)) {
            quoted.add(quote(v));
        }
        return "[" + String.join(",", quoted) + "]";
    }

    private static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        return b.append('"').toString();
    }
}
