import java.time.Duration;
import java.time.Instant;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.stream.Collectors;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A transactional consume-transform-produce application with Kafka's Java client, its
 * consumer in a KIP-848 group ({@code group.protocol=consumer}): {@code ConsumerGroupEos
 * <bootstrap> <slot> <input> <output> <group>}. The Java twin of tests/kip848_eos_child.py,
 * run by tests/kafka/test_java_consumer_group_eos.py on Exactly and on Kafka 4.4 through
 * broker SIGKILLs and member kills.
 *
 * <p>It reads {@code input} with read_committed and, per poll, writes each record
 * transformed ({@code in-P-O} becomes {@code out-P-O}) to the same partition of
 * {@code output} inside a transaction of the producer {@code <group>-java-<slot>} that also
 * carries the poll's next offsets, sent with the consumer's group metadata (its member
 * epoch: a commit from an epoch that is no longer the member's is fenced). The producer
 * uses transactions version 2 when the broker finalizes {@code transaction.version} 2: no
 * AddPartitionsToTxn or AddOffsetsToTxn, an epoch bump at every EndTxn. A transaction that
 * must abort is aborted and the poll's partitions rewound to their committed offsets; a
 * fatal error (the producer fenced, a failed abort) closes both clients and makes new ones.
 * Each commit prints {@code committed <records>} on standard output. SIGTERM stops it after
 * the transaction under way, leaving the group; it stops by itself after five minutes.
 */
public final class ConsumerGroupEos {
    private static final Duration POLL = Duration.ofMillis(500);
    private static final Duration CLOSE = Duration.ofSeconds(10);
    private static final long LIFETIME_MS = 300_000;
    /** how long a commit may be retried (a broker restarting) before new clients are made */
    private static final long COMMIT_MS = 90_000;

    private final String bootstrap, input, output, group, transactionalId;
    private volatile boolean stopping;

    private ConsumerGroupEos(String[] args) {
        bootstrap = args[0];
        input = args[2];
        output = args[3];
        group = args[4];
        transactionalId = group + "-java-" + args[1];
    }

    public static void main(String[] args) throws Exception {
        ConsumerGroupEos app = new ConsumerGroupEos(args);
        Thread main = Thread.currentThread();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            app.stopping = true;
            try {
                main.join(60_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));
        app.run();
        System.out.flush();
    }

    private void run() {
        long deadline = System.currentTimeMillis() + LIFETIME_MS;
        while (!stopping && System.currentTimeMillis() < deadline) {
            KafkaProducer<String, String> producer = null;
            KafkaConsumer<String, String> consumer = null;
            try {
                producer = producer();
                producer.initTransactions();
                consumer = consumer();
                consumer.subscribe(List.of(input), new Say());
                while (!stopping && System.currentTimeMillis() < deadline) {
                    onePoll(producer, consumer);
                }
            } catch (KafkaException e) {
                say("new clients after " + e);
            } finally {
                if (consumer != null) {
                    consumer.close(CLOSE);
                }
                if (producer != null) {
                    producer.close(CLOSE);
                }
            }
        }
    }

    private KafkaProducer<String, String> producer() {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        // longer than a broker's restart: a transaction open across one must not time out
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 60_000);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 30_000);
        p.put(ProducerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, 500);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    private KafkaConsumer<String, String> consumer() {
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 40);
        c.put(ConsumerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, 500);
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return new KafkaConsumer<>(c);
    }

    /** One poll's records copied in one transaction with their offsets. */
    private void onePoll(KafkaProducer<String, String> producer, KafkaConsumer<String, String> consumer) {
        ConsumerRecords<String, String> records = consumer.poll(POLL);
        if (records.isEmpty()) {
            return;
        }
        producer.beginTransaction();
        try {
            Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
            for (TopicPartition tp : records.partitions()) {
                List<ConsumerRecord<String, String>> some = records.records(tp);
                for (ConsumerRecord<String, String> r : some) {
                    producer.send(new ProducerRecord<>(output, tp.partition(), r.key(), "out-" + r.value().substring(3)));
                }
                next.put(tp, new OffsetAndMetadata(some.get(some.size() - 1).offset() + 1));
            }
            producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
            commit(producer);
            System.out.println("committed " + records.count() + " " + records.partitions());
            System.out.flush();
        } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException
                 | UnsupportedVersionException e) {
            throw e;  // fatal for this producer: new clients
        } catch (KafkaException e) {
            // abortable (a fenced member epoch, a Produce refused): a failed abort is fatal too
            say("aborting after " + e);
            producer.abortTransaction();
            rewind(consumer, records.partitions());
        }
    }

    /** Each change of the member's partitions, on standard error (a failure's story). */
    private final class Say implements ConsumerRebalanceListener {
        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            say("assigned " + partitions);
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            say("revoked " + partitions);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            say("lost " + partitions);
        }
    }

    private void say(String what) {
        System.err.println(Instant.now() + " " + transactionalId + ": " + what);
    }

    /** commitTransaction, retried while it times out (the broker restarting). */
    private void commit(KafkaProducer<String, String> producer) {
        long deadline = System.currentTimeMillis() + COMMIT_MS;
        while (true) {
            try {
                producer.commitTransaction();
                return;
            } catch (TimeoutException e) {
                if (System.currentTimeMillis() > deadline) {
                    throw e;
                }
            }
        }
    }

    /** The aborted poll's partitions that are still ours back to their committed offsets. */
    private void rewind(KafkaConsumer<String, String> consumer, Set<TopicPartition> polled) {
        Set<TopicPartition> ours = polled.stream().filter(consumer.assignment()::contains).collect(Collectors.toSet());
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(ours);
        for (TopicPartition tp : ours) {
            OffsetAndMetadata offset = committed.get(tp);
            if (offset == null) {
                consumer.seekToBeginning(List.of(tp));
            } else {
                consumer.seek(tp, offset.offset());
            }
        }
    }
}
