"""Where episodes come from: the collector, the chat-template continuation, the trajectory record, env making."""
