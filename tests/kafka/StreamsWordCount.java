import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams with {@code exactly_once_v2}: counts the words of the input topic
 * (values), re-keyed by word -- so through a repartition topic, into a state store with
 * a compacted changelog -- to the output topic; every commit is a transaction of the
 * Java producer that carries the consumer's offsets (KIP-447).
 *
 * <p>{@code StreamsWordCount <bootstrap> <input> <output> <application id> <state dir>
 * <words> <expected count per word> <seconds>}: runs the topology and, beside it, a
 * read_committed Java consumer of the output until that many words' latest counts are
 * the expected one; prints {@code COUNTS {word=count, ...}} (the last count read per word)
 * and exits 0, or exits 1 after the given seconds.
 */
public final class StreamsWordCount {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], input = args[1], output = args[2], application = args[3], stateDir = args[4];
        int words = Integer.parseInt(args[5]);
        long expected = Long.parseLong(args[6]);
        long deadline = System.currentTimeMillis() + 1000L * Long.parseLong(args[7]);

        Properties config = new Properties();
        config.put(StreamsConfig.APPLICATION_ID_CONFIG, application);
        config.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        config.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        config.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        // consumed repartition records deleted (DeleteRecords) at a commit a second after the last
        config.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 1000);
        config.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        config.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        config.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // an instance killed with SIGKILL leaves the group within seconds, not Kafka's 45
        config.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        config.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1500);

        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(input)
            .groupBy((key, word) -> word)
            .count(Materialized.as("counts"))
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        Properties readerConfig = new Properties();
        readerConfig.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        readerConfig.put(ConsumerConfig.GROUP_ID_CONFIG, application + "-reader");
        readerConfig.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        readerConfig.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");

        Map<String, Long> counts = new TreeMap<>();
        try (KafkaStreams streams = new KafkaStreams(builder.build(), config);
             KafkaConsumer<String, Long> reader = new KafkaConsumer<>(readerConfig, new StringDeserializer(),
                 Serdes.Long().deserializer())) {
            streams.setUncaughtExceptionHandler(e -> {
                e.printStackTrace();
                return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
            });
            streams.start();
            reader.subscribe(List.of(output));
            Map<String, Long> seen = new HashMap<>();
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, Long> record : reader.poll(Duration.ofMillis(200))) {
                    seen.put(record.key(), record.value());
                }
                counts.clear();
                counts.putAll(seen);
                if (counts.size() >= words && counts.values().stream().allMatch(c -> c >= expected)) {
                    System.out.println("COUNTS " + counts);
                    System.out.flush();
                    streams.close(Duration.ofSeconds(20));
                    Runtime.getRuntime().halt(0);
                }
                if (streams.state() == KafkaStreams.State.ERROR || streams.state() == KafkaStreams.State.NOT_RUNNING) {
                    break;
                }
            }
            System.out.println("COUNTS " + counts + " state " + streams.state());
            System.out.flush();
            Runtime.getRuntime().halt(1);
        }
    }
}
