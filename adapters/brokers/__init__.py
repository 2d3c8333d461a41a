"""Event destinations' transports (issue 35): publishing the team's messages into its own
RabbitMQ or NATS JetStream, and the publisher that drives them from the outbox."""
