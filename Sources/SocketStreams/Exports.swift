// Apps that use the bridge usually want the socket core's types too (`SocketError` in
// `streamError`, the async `SocketConnection`): one `import SocketStreams` brings both, as
// swift-nio's `NIO` module re-exports `NIOCore`.
@_exported import SocketCore
