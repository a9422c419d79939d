// The gateway's /metrics: its own families and every node's, each family once, node samples labelled.
import test from 'ava';
import { mergeMetrics } from '../../../dist/remote/metrics-merge.js';

test('a family several sources export is written once, with every source\'s samples under it', (t) => {
  const own = '# HELP up_seconds Time up\n# TYPE up_seconds gauge\nup_seconds 5\n';
  const node = [
    '# HELP up_seconds Time up', '# TYPE up_seconds gauge', 'up_seconds 7',
    '# HELP nv_inference_count Rows', '# TYPE nv_inference_count counter', 'nv_inference_count{model="digits",version="1"} 12',
    '# HELP lat Latency', '# TYPE lat histogram', 'lat_bucket{le="1"} 3', 'lat_bucket{le="+Inf"} 4', 'lat_sum 2.5', 'lat_count 4', '',
  ].join('\n');
  const merged = mergeMetrics([{ node: null, text: own }, { node: 'a:1', text: node }, { node: 'b:2', text: node }]);
  t.is(merged, [
    '# HELP up_seconds Time up', '# TYPE up_seconds gauge', 'up_seconds 5', 'up_seconds{node="a:1"} 7', 'up_seconds{node="b:2"} 7',
    '# HELP nv_inference_count Rows', '# TYPE nv_inference_count counter',
    'nv_inference_count{model="digits",version="1",node="a:1"} 12', 'nv_inference_count{model="digits",version="1",node="b:2"} 12',
    '# HELP lat Latency', '# TYPE lat histogram',
    'lat_bucket{le="1",node="a:1"} 3', 'lat_bucket{le="+Inf",node="a:1"} 4', 'lat_sum{node="a:1"} 2.5', 'lat_count{node="a:1"} 4',
    'lat_bucket{le="1",node="b:2"} 3', 'lat_bucket{le="+Inf",node="b:2"} 4', 'lat_sum{node="b:2"} 2.5', 'lat_count{node="b:2"} 4',
    '',
  ].join('\n'));
});
