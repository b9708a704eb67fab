{{/* The image kollect-apiserver runs: image.repository:tag, tag defaulting to the chart's appVersion. */}}
{{- define "kollect.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* etcd client URLs of the bundled members. */}}
{{- define "kollect.etcdMember" -}}
kollect-etcd-{{ .i }}.kollect-etcd.{{ .ns }}.svc
{{- end }}

{{/* Refuses combinations that cannot work, at render time. */}}
{{- define "kollect.validate" -}}
{{- $modes := list "bundled" "embedded" "external" }}
{{- if not (has .Values.etcd.mode $modes) }}
{{- fail (printf "etcd.mode: must be one of %s, not %q" (join ", " $modes) .Values.etcd.mode) }}
{{- end }}
{{- if and (eq .Values.etcd.mode "embedded") (ne (int .Values.replicas) 1) }}
{{- fail (printf "replicas: must be 1 with etcd.mode embedded (each replica would run its own etcd), not %d" (int .Values.replicas)) }}
{{- end }}
{{- if and (eq .Values.etcd.mode "external") (or (empty .Values.etcd.external.servers) (empty .Values.etcd.external.clientSecret)) }}
{{- fail "etcd.external.servers and etcd.external.clientSecret: both are required with etcd.mode external" }}
{{- end }}
{{- $tls := list "generate" "certManager" "secrets" }}
{{- if not (has .Values.tls.mode $tls) }}
{{- fail (printf "tls.mode: must be one of %s, not %q" (join ", " $tls) .Values.tls.mode) }}
{{- end }}
{{- if and (eq .Values.tls.mode "secrets") (empty .Values.tls.caBundle) }}
{{- fail "tls.caBundle: required with tls.mode secrets (base64 PEM of the CA that signed kollect-serving-cert; hack/gen-certs.sh --print-ca-bundle)" }}
{{- end }}
{{- if lt (int .Values.replicas) 1 }}
{{- fail "replicas: must be at least 1" }}
{{- end }}
{{- with .Values.fileSinkRoot }}
{{- $root := clean . }}
{{- if not (isAbs $root) }}
{{- fail (printf "fileSinkRoot: must be an absolute path, not %q" .) }}
{{- end }}
{{- /* Tenants' sinks write under it: it must not reach what the server keeps. */}}
{{- range list "/var/lib/kollect" "/var/run/kollect" "/tmp" }}
{{- if or (eq $root .) (eq $root "/") (hasPrefix (printf "%s/" .) $root) (hasPrefix (printf "%s/" $root) .) }}
{{- fail (printf "fileSinkRoot: %s overlaps %s, which kollect-apiserver uses itself; use a directory of its own such as /var/lib/kollect-files" $root .) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
kollect.certs issues the CAs and certificates of tls.mode generate once per
render and keeps them in .Values for every template that needs them. On an
upgrade the Secrets already in the cluster are reused, so the serving
certificate and the APIService caBundle stay a matching pair.
*/}}
{{- define "kollect.certs" -}}
{{- if not (hasKey .Values "generatedCerts") }}
{{- $ns := .Release.Namespace }}
{{- $days := int .Values.tls.validityDays }}
{{- $serving := lookup "v1" "Secret" $ns "kollect-serving-cert" }}
{{- $etcd := lookup "v1" "Secret" $ns "kollect-etcd-tls" }}
{{- $client := lookup "v1" "Secret" $ns "kollect-etcd-client" }}
{{- $c := dict }}
{{- /* Each pair is reused on its own: the etcd ones exist only with the bundled etcd. */}}
{{- if $serving }}
{{- $_ := set $c "serving" $serving.data }}
{{- else }}
{{- $svc := printf "kollect-api.%s.svc" $ns }}
{{- $ca := genCAWithKey "kollect-ca" $days (genPrivateKey "ecdsa") }}
{{- $cert := genSignedCertWithKey $svc nil (list $svc (printf "%s.%s" $svc .Values.tls.clusterDomain)) $days $ca (genPrivateKey "ecdsa") }}
{{- $_ := set $c "serving" (dict "ca.crt" ($ca.Cert | b64enc) "tls.crt" ($cert.Cert | b64enc) "tls.key" ($cert.Key | b64enc)) }}
{{- end }}
{{- if and $etcd $client }}
{{- $_ := set $c "etcd" $etcd.data }}
{{- $_ := set $c "client" $client.data }}
{{- else if eq .Values.etcd.mode "bundled" }}
{{- $eca := genCAWithKey "kollect-etcd-ca" $days (genPrivateKey "ecdsa") }}
{{- $names := list "localhost" }}
{{- range $i := until 3 }}
{{- $m := include "kollect.etcdMember" (dict "i" $i "ns" $ns) }}
{{- $names = append $names $m }}
{{- $names = append $names (printf "%s.%s" $m $.Values.tls.clusterDomain) }}
{{- end }}
{{- $server := genSignedCertWithKey "kollect-etcd" (list "127.0.0.1") $names $days $eca (genPrivateKey "ecdsa") }}
{{- $peer := genSignedCertWithKey "kollect-etcd-peer" nil $names $days $eca (genPrivateKey "ecdsa") }}
{{- $cl := genSignedCertWithKey "kollect-apiserver" nil nil $days $eca (genPrivateKey "ecdsa") }}
{{- $_ := set $c "etcd" (dict "ca.crt" ($eca.Cert | b64enc) "server.crt" ($server.Cert | b64enc) "server.key" ($server.Key | b64enc) "peer.crt" ($peer.Cert | b64enc) "peer.key" ($peer.Key | b64enc)) }}
{{- $_ := set $c "client" (dict "ca.crt" ($eca.Cert | b64enc) "tls.crt" ($cl.Cert | b64enc) "tls.key" ($cl.Key | b64enc)) }}
{{- end }}
{{- $_ := set .Values "generatedCerts" $c }}
{{- end }}
{{- end }}
