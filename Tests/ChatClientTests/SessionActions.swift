import ChatClient
import ChatProtocol

// What the session-level tests read out of a `ClientSession`'s actions, written once for all.

/// The frames `actions` send, in order.
func frames(_ actions: [SessionAction]) -> [Frame] {
    actions.flatMap { action -> [Frame] in
        if case .send(let frames) = action { return frames }
        return []
    }
}

/// The events `actions` show, in order, logged or not.
func events(_ actions: [SessionAction]) -> [ChatEvent] {
    actions.compactMap(shownEvent)
}

/// The event `action` shows, logged (`show`) or not (`transient`); nil for other actions.
func shownEvent(_ action: SessionAction) -> ChatEvent? {
    switch action {
    case .show(let event), .transient(let event): event
    default: nil
    }
}
