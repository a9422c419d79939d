/**
 * A node's stable name: what a pooled gateway places models by (remote/fleet-routes.ts), so that a
 * node rescheduled at a new address keeps its models' places instead of counting as a new node.
 *
 * `node_name` in the node file (or INFERENCE_SERVER_NODE_NAME) when set. Otherwise, in a
 * Kubernetes pod, the host name, which is the pod's name (stable across reschedules in a
 * StatefulSet); elsewhere the host name and the gRPC port, since several nodes on one machine
 * share a host name and would otherwise count as one node restarted.
 */
import os from 'node:os';

export function nodeName(configured: string, grpcPort: number, env: NodeJS.ProcessEnv = process.env): string {
  if (configured) return configured;
  if (env.KUBERNETES_SERVICE_HOST) return os.hostname();
  return `${os.hostname()}:${grpcPort}`;
}
