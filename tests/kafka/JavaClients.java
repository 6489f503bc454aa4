import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.AbortTransactionSpec;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.DescribeProducersResult.PartitionProducerState;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Kafka's Java client against a broker, every step printing one line that is the same on
 * any broker that serves Kafka's protocol as Kafka does: {@code JavaClients <bootstrap>
 * <name prefix> [<client properties file> [<step>,...]]} (the file: security settings,
 * for SASL_SSL, or "-"; the steps: the names they print, all by default).
 *
 * <p>An idempotent producer writes the input; a transactional consume-transform-produce
 * loop (KIP-447: the consumer's group metadata in each transaction) copies it upper-cased,
 * one transaction aborted on purpose; a read_committed consumer reads the output (each
 * input record once, nothing aborted); the AdminClient's topics, configs, partitions,
 * delete records, ACLs, consumer groups and transactions calls
 * (listTransactions, describeTransactions, describeProducers, abortTransaction,
 * fenceProducers). A step that fails prints {@code <step>: ERROR <exception>} and the
 * program goes on, so that one run shows everything a broker rejects.
 * tests/kafka/test_java_client.py runs it on Apache Kafka and on Exactly.
 */
public final class JavaClients {
    private static final int RECORDS = 30;
    private static final Duration WAIT = Duration.ofSeconds(30);

    private final String bootstrap;
    private final String in, out, tx, group;
    private final Properties security = new Properties();
    private final Admin admin;
    private final Set<String> steps;

    private JavaClients(String[] args) throws Exception {
        bootstrap = args[0];
        in = args[1] + "-in";
        out = args[1] + "-out";
        tx = args[1] + "-tx";
        group = args[1] + "-group";
        steps = args.length > 3 ? Set.of(args[3].split(",")) : Set.of();
        if (args.length > 2 && !args[2].equals("-")) {
            try (var reader = new java.io.FileReader(args[2])) {
                security.load(reader);
            }
        }
        admin = Admin.create(config(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap)));
    }

    public static void main(String[] args) throws Exception {
        JavaClients run = new JavaClients(args);
        run.step("topics", run::topics);
        run.step("configs", run::configs);
        run.step("partitions", run::partitions);
        run.step("idempotent producer", run::idempotentProducer);
        run.step("consume-transform-produce", run::consumeTransformProduce);
        run.step("read_committed", run::readCommitted);
        run.step("consumer groups", run::consumerGroups);
        run.step("transactions", run::transactions);
        run.step("abort transaction", run::abortTransaction);
        run.step("fence producers", run::fenceProducers);
        run.step("delete records", run::deleteRecords);
        run.step("acls", run::acls);
        run.step("delete topics", run::deleteTopics);
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }

    private interface Step {
        void run() throws Exception;
    }

    private interface Read<T> {
        T get() throws Exception;
    }

    /**
     * {@code read}'s answer once {@code done} holds of it (or after {@link #WAIT}): Kafka's
     * broker learns of a change from its controller a moment after the admin call answers.
     */
    private static <T> T eventually(Read<T> read, java.util.function.Predicate<T> done) throws Exception {
        long deadline = System.currentTimeMillis() + WAIT.toMillis();
        T value = read.get();
        while (!done.test(value) && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);
            value = read.get();
        }
        return value;
    }

    private void step(String name, Step step) {
        if (!steps.isEmpty() && !steps.contains(name)) {
            return;
        }
        long started = System.currentTimeMillis();
        try {
            step.run();
            System.err.println(name + ": " + (System.currentTimeMillis() - started) + " ms");
        } catch (Exception e) {
            Throwable cause = e instanceof ExecutionException ? e.getCause() : e;
            System.out.println(name + ": ERROR " + cause.getClass().getSimpleName() + ": " + cause.getMessage());
            cause.printStackTrace();
        }
    }

    private static void print(String line) {
        System.out.println(line);
    }

    private Properties config(Map<String, Object> settings) {
        Properties config = new Properties();
        config.putAll(security);
        config.putAll(settings);
        return config;
    }

    // -- the AdminClient ---------------------------------------------------------------------------

    private void topics() throws Exception {
        admin.createTopics(List.of(new NewTopic(in, 2, (short) 1), new NewTopic(out, 2, (short) 1))).all().get();
        Set<String> listed = eventually(() -> admin.listTopics().names().get(),
            names -> names.containsAll(List.of(in, out)));
        Map<String, TopicDescription> described = admin.describeTopics(List.of(in, out)).allTopicNames().get();
        print("topics: listed " + (listed.containsAll(List.of(in, out))) + ", partitions "
            + described.get(in).partitions().size() + " " + described.get(out).partitions().size()
            + ", leader " + described.get(in).partitions().get(0).leader().id());
    }

    private void configs() throws Exception {
        ConfigResource topic = new ConfigResource(ConfigResource.Type.TOPIC, in);
        admin.incrementalAlterConfigs(Map.of(topic, List.of(
            new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET),
            new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"), AlterConfigOp.OpType.SET)))).all().get();
        ConfigEntry retention = eventually(() -> admin.describeConfigs(List.of(topic)).all().get().get(topic)
            .get("retention.ms"), entry -> entry.value().equals("3600000"));
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, "1");
        ConfigEntry partitions = admin.describeConfigs(List.of(broker)).all().get().get(broker).get("num.partitions");
        print("configs: retention.ms " + retention.value() + " " + retention.source()
            + ", broker num.partitions " + partitions.value() + " " + partitions.source());
    }

    private void partitions() throws Exception {
        admin.createPartitions(Map.of(out, NewPartitions.increaseTo(3))).all().get();
        int count = eventually(() -> admin.describeTopics(List.of(out)).allTopicNames().get().get(out).partitions()
            .size(), n -> n == 3);
        print("partitions: " + out.substring(out.lastIndexOf('-') + 1) + " now " + count);
    }

    private void deleteRecords() throws Exception {
        TopicPartition first = new TopicPartition(in, 0);
        long low = admin.deleteRecords(Map.of(first, RecordsToDelete.beforeOffset(2))).lowWatermarks().get(first).get()
            .lowWatermark();
        long earliest = admin.listOffsets(Map.of(first, org.apache.kafka.clients.admin.OffsetSpec.earliest())).all().get()
            .get(first).offset();
        print("delete records: low watermark " + low + ", earliest " + earliest);
    }

    private void acls() throws Exception {
        AclBinding binding = new AclBinding(new ResourcePattern(ResourceType.TOPIC, in, PatternType.PREFIXED),
            new AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW));
        admin.createAcls(List.of(binding)).all().get();
        AclBindingFilter filter = new AclBindingFilter(
            new ResourcePatternFilter(ResourceType.TOPIC, in, PatternType.ANY), AccessControlEntryFilter.ANY);
        Collection<AclBinding> described = eventually(() -> admin.describeAcls(filter).values().get(),
            acls -> !acls.isEmpty());
        Collection<AclBinding> deleted = admin.deleteAcls(List.of(filter)).all().get();
        Collection<AclBinding> after = eventually(() -> admin.describeAcls(filter).values().get(), Collection::isEmpty);
        print("acls: described " + described + ", deleted " + deleted.size() + ", left " + after.size());
    }

    private void deleteTopics() throws Exception {
        admin.deleteTopics(List.of(in, out)).all().get();
        Set<String> listed = eventually(() -> admin.listTopics().names().get(),
            names -> !(names.contains(in) || names.contains(out)));
        print("delete topics: gone " + !(listed.contains(in) || listed.contains(out)));
    }

    // -- producers and consumers ---------------------------------------------------------------------

    private KafkaProducer<String, String> producer(Map<String, Object> settings) {
        Map<String, Object> all = new HashMap<>(settings);
        all.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        return new KafkaProducer<>(config(all), new StringSerializer(), new StringSerializer());
    }

    private KafkaConsumer<String, String> consumer(Map<String, Object> settings) {
        Map<String, Object> all = new HashMap<>(settings);
        all.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        all.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        all.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        all.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        return new KafkaConsumer<>(config(all), new StringDeserializer(), new StringDeserializer());
    }

    private void idempotentProducer() throws Exception {
        try (KafkaProducer<String, String> producer = producer(Map.of(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true,
                ProducerConfig.ACKS_CONFIG, "all"))) {
            long acked = 0;
            for (int i = 0; i < RECORDS; i++) {
                producer.send(new ProducerRecord<>(in, i % 2, "k" + i, "record-" + i)).get();
                acked++;
            }
            print("idempotent producer: acked " + acked);
        }
    }

    /** The input copied upper-cased in transactions of up to 10 records, the second aborted
     * (and its records copied again by the next). */
    private void consumeTransformProduce() throws Exception {
        try (KafkaConsumer<String, String> consumer = consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 10));
             KafkaProducer<String, String> producer = producer(Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, tx))) {
            producer.initTransactions();
            consumer.subscribe(List.of(in));
            int copied = 0, committed = 0, aborted = 0;
            long deadline = System.currentTimeMillis() + WAIT.toMillis();
            while (copied < RECORDS && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                producer.beginTransaction();
                for (ConsumerRecord<String, String> record : records) {
                    producer.send(new ProducerRecord<>(out, record.partition(), record.key(), record.value().toUpperCase()));
                }
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (TopicPartition partition : records.partitions()) {
                    List<ConsumerRecord<String, String>> these = records.records(partition);
                    offsets.put(partition, new OffsetAndMetadata(these.get(these.size() - 1).offset() + 1));
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                if (committed == 1 && aborted == 0) {
                    producer.abortTransaction();
                    aborted++;
                    for (TopicPartition partition : records.partitions()) {
                        consumer.seek(partition, records.records(partition).get(0).offset());
                    }
                } else {
                    producer.commitTransaction();
                    committed++;
                    copied += records.count();
                }
            }
            print("consume-transform-produce: copied " + copied + ", aborted " + aborted);
        }
    }

    private void readCommitted() {
        try (KafkaConsumer<String, String> consumer = consumer(Map.of())) {
            List<TopicPartition> partitions = List.of(new TopicPartition(out, 0), new TopicPartition(out, 1));
            consumer.assign(partitions);
            Map<String, Integer> seen = new TreeMap<>();
            long deadline = System.currentTimeMillis() + WAIT.toMillis();
            while (seen.values().stream().mapToInt(Integer::intValue).sum() < RECORDS
                   && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                    seen.merge(record.value(), 1, Integer::sum);
                }
            }
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions);
            boolean once = seen.size() == RECORDS && seen.values().stream().allMatch(c -> c == 1);
            print("read_committed: " + seen.size() + " values, each once " + once + ", committed offsets "
                + committedOffsets() + ", more in the log than read " + (ends.values().stream().mapToLong(Long::longValue).sum() > RECORDS));
        }
    }

    private Map<Integer, Long> committedOffsets() {
        try (KafkaConsumer<String, String> consumer = consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group))) {
            Map<Integer, Long> offsets = new TreeMap<>();
            consumer.committed(Set.of(new TopicPartition(in, 0), new TopicPartition(in, 1)))
                .forEach((partition, offset) -> offsets.put(partition.partition(), offset.offset()));
            return offsets;
        }
    }

    private void consumerGroups() throws Exception {
        boolean listed = admin.listConsumerGroups().all().get().stream()
            .map(ConsumerGroupListing::groupId).anyMatch(group::equals);
        ConsumerGroupDescription described = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
        Map<TopicPartition, OffsetAndMetadata> offsets = admin.listConsumerGroupOffsets(group)
            .partitionsToOffsetAndMetadata().get();
        TopicPartition first = new TopicPartition(in, 0), second = new TopicPartition(in, 1);
        admin.alterConsumerGroupOffsets(group, Map.of(first, new OffsetAndMetadata(5))).all().get();
        admin.deleteConsumerGroupOffsets(group, Set.of(second)).all().get();
        Map<TopicPartition, OffsetAndMetadata> after = admin.listConsumerGroupOffsets(group)
            .partitionsToOffsetAndMetadata().get();
        admin.deleteConsumerGroups(List.of(group)).all().get();
        boolean gone = admin.listConsumerGroups().all().get().stream()
            .map(ConsumerGroupListing::groupId).noneMatch(group::equals);
        print("consumer groups: listed " + listed + ", " + described.groupState() + " with "
            + described.members().size() + " members, protocol type '" + described.type() + "', offsets "
            + new TreeMap<>(offsets.entrySet().stream().collect(Collectors.toMap(e -> e.getKey().partition(),
                e -> e.getValue().offset())))
            + ", after alter and delete " + new TreeMap<>(after.entrySet().stream().collect(Collectors.toMap(
                e -> e.getKey().partition(), e -> e.getValue().offset())))
            + ", deleted " + gone);
    }

    private void transactions() throws Exception {
        Collection<TransactionListing> listings = admin.listTransactions(new ListTransactionsOptions()).all().get();
        Optional<TransactionListing> ours = listings.stream().filter(l -> l.transactionalId().equals(tx)).findFirst();
        TransactionDescription description = admin.describeTransactions(List.of(tx)).description(tx).get();
        PartitionProducerState state = admin.describeProducers(List.of(new TopicPartition(out, 0))).partitionResult(
            new TopicPartition(out, 0)).get();
        print("transactions: listed " + ours.map(TransactionListing::state).orElse(null)
            + ", described " + description.state() + " timeout " + description.transactionTimeoutMs()
            + " topics " + description.topicPartitions().size()
            + ", producers on " + out.substring(out.lastIndexOf('-') + 1) + "-0 " + state.activeProducers().size()
            + " open " + state.activeProducers().stream().filter(p -> p.currentTransactionStartOffset().isPresent()).count());
    }

    /** A transaction left open, aborted by the admin's marker: the read_committed end moves past it. */
    private void abortTransaction() throws Exception {
        TopicPartition partition = new TopicPartition(out, 2);
        KafkaProducer<String, String> producer = producer(Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, tx + "-open"));
        producer.initTransactions();
        producer.beginTransaction();
        producer.send(new ProducerRecord<>(out, 2, "k", "open")).get();
        ProducerState open = admin.describeProducers(List.of(partition)).partitionResult(partition).get()
            .activeProducers().get(0);
        long before = lastStableOffset(partition);
        admin.abortTransaction(new AbortTransactionSpec(partition, open.producerId(), (short) open.producerEpoch(),
            open.coordinatorEpoch().orElse(-1))).all().get();
        long after = lastStableOffset(partition);
        producer.close(Duration.ZERO);
        print("abort transaction: open at " + open.currentTransactionStartOffset().orElse(-1) + ", stable end "
            + before + " then " + after);
    }

    private long lastStableOffset(TopicPartition partition) {
        try (KafkaConsumer<String, String> consumer = consumer(Map.of())) {
            return consumer.endOffsets(List.of(partition)).get(partition);
        }
    }

    /** fenceProducers bumps the epoch: the fenced producer's commit fails. */
    private void fenceProducers() throws Exception {
        String id = tx + "-fenced";
        KafkaProducer<String, String> producer = producer(Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, id));
        producer.initTransactions();
        producer.beginTransaction();
        producer.send(new ProducerRecord<>(out, 0, "k", "fenced")).get();
        admin.fenceProducers(List.of(id)).all().get();
        String outcome;
        try {
            producer.commitTransaction();
            outcome = "committed";
        } catch (Exception e) {
            outcome = e.getClass().getSimpleName();
        }
        producer.close(Duration.ZERO);
        TransactionDescription description = admin.describeTransactions(List.of(id)).description(id).get();
        print("fence producers: the fenced producer's commit " + outcome + ", then " + description.state()
            + " at epoch " + description.producerEpoch());
    }
}
