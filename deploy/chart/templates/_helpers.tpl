{{/* Names: <release>-fatia, or the release name alone when it already says fatia. */}}
{{- define "fatia.fullname" -}}
{{- if contains "fatia" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-fatia" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "fatia.labels" -}}
app.kubernetes.io/name: fatia
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector labels of one component: include "fatia.selector" (list . "web") */}}
{{- define "fatia.selector" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: fatia
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "fatia.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount of processes that never call the Kubernetes API, and the one of those that do. */}}
{{- define "fatia.serviceAccount" -}}{{ include "fatia.fullname" . }}{{- end -}}
{{- define "fatia.clusterServiceAccount" -}}{{ include "fatia.fullname" . }}-cluster{{- end -}}
{{/* web's own identity when node agents bootstrap: it may only review their tokens and read their pods. */}}
{{- define "fatia.webServiceAccount" -}}{{ include "fatia.fullname" . }}-web{{- end -}}

{{- define "fatia.kubernetes" -}}{{ if eq .Values.cluster.backend "kubernetes" }}true{{ end }}{{- end -}}

{{/* Django's booleans are spelled True and False (portal/settings.py env_bool). */}}
{{- define "fatia.bool" -}}{{ ternary "True" "False" . }}{{- end -}}

{{/*
The secrets, as (env name, secret name, key) triples: a Secret of the user's (existingSecret) or the chart's own.
Required ones fail the render when neither is given; optional ones are left out.
*/}}
{{- define "fatia.secretItems" -}}
{{- $chartSecret := include "fatia.fullname" . -}}
{{- $items := list
  (list "SECRET_KEY" .Values.secretKey.value .Values.secretKey.existingSecret .Values.secretKey.key true "secretKey.value or secretKey.existingSecret")
  (list "DATABASE_URL" .Values.database.url .Values.database.existingSecret .Values.database.key true "database.url or database.existingSecret")
  (list "CELERY_BROKER_URL" .Values.broker.url .Values.broker.existingSecret .Values.broker.key true "broker.url or broker.existingSecret")
  (list "CACHE_URL" .Values.cache.url .Values.cache.existingSecret .Values.cache.key false "")
  (list "FATIA_OIDC_CLIENT_SECRET" .Values.oidc.clientSecret .Values.oidc.existingSecret .Values.oidc.key false "")
  (list "FATIA_METRICS_TOKEN" .Values.metrics.token .Values.metrics.existingSecret .Values.metrics.key false "")
-}}
{{- $out := list -}}
{{- range $items -}}
{{- $name := index . 0 -}}{{- $value := index . 1 -}}{{- $existing := index . 2 -}}{{- $key := index . 3 -}}
{{- if $existing -}}
{{- $out = append $out (dict "env" $name "secret" $existing "key" $key) -}}
{{- else if $value -}}
{{- $out = append $out (dict "env" $name "secret" $chartSecret "key" $name) -}}
{{- else if index . 4 -}}
{{- fail (printf "%s: set %s" $name (index . 5)) -}}
{{- end -}}
{{- end -}}
{{- /* The telemetry queue's Redis when queued ingest is on: its own secret or value, else the cache's. */ -}}
{{- if .Values.ingest.enabled -}}
{{- $q := .Values.ingest.queue -}}
{{- if $q.existingSecret -}}
{{- $out = append $out (dict "env" "FATIA_INGEST_QUEUE_URL" "secret" $q.existingSecret "key" $q.key) -}}
{{- else if $q.url -}}
{{- $out = append $out (dict "env" "FATIA_INGEST_QUEUE_URL" "secret" $chartSecret "key" "FATIA_INGEST_QUEUE_URL") -}}
{{- else if .Values.cache.existingSecret -}}
{{- $out = append $out (dict "env" "FATIA_INGEST_QUEUE_URL" "secret" .Values.cache.existingSecret "key" .Values.cache.key) -}}
{{- else if .Values.cache.url -}}
{{- $out = append $out (dict "env" "FATIA_INGEST_QUEUE_URL" "secret" $chartSecret "key" "CACHE_URL") -}}
{{- else -}}
{{- fail "FATIA_INGEST_QUEUE_URL: ingest.enabled needs a Redis: set ingest.queue.url, ingest.queue.existingSecret or cache.url" -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{- define "fatia.metricsEnabled" -}}{{ if or .Values.metrics.token .Values.metrics.existingSecret }}true{{ end }}{{- end -}}

{{/* Volumes every Fatia pod has: the secrets as files, and /tmp (the only writable place). */}}
{{- define "fatia.volumes" -}}
- name: secrets
  projected:
    defaultMode: 0440
    sources:
    {{- range (include "fatia.secretItems" . | fromJsonArray) }}
    - secret:
        name: {{ .secret }}
        items:
        - key: {{ .key }}
          path: {{ .env }}
    {{- end }}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- end -}}

{{- define "fatia.volumeMounts" -}}
- name: secrets
  mountPath: /var/run/secrets/fatia
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* Environment every Fatia container has: the ConfigMap, and <NAME>_FILE for each secret. */}}
{{- define "fatia.env" -}}
envFrom:
- configMapRef:
    name: {{ include "fatia.fullname" . }}
env:
{{- range (include "fatia.secretItems" . | fromJsonArray) }}
- name: {{ .env }}_FILE
  value: /var/run/secrets/fatia/{{ .env }}
{{- end }}
{{- end -}}

{{- define "fatia.podSecurityContext" -}}
{{- $ctx := dict -}}
{{- range $k, $v := .Values.podSecurityContext -}}
{{- if not (kindIs "invalid" $v) -}}{{- $_ := set $ctx $k $v -}}{{- end -}}
{{- end -}}
{{- toYaml $ctx -}}
{{- end -}}

{{/*
Annotations that tell checkov why a finding does not apply here (checkov reads checkov.io/skipN annotations).
*/}}
{{- define "fatia.checkovSkips" -}}
{{- $ := .root -}}
{{- $skips := list
  "CKV_K8S_43=images are chosen by tag or by digest (image.digest); a digest cannot be the chart's default"
-}}
{{- if not $.Values.podSecurityContext.runAsUser -}}
{{- $skips = append $skips "CKV_K8S_40=runAsUser is left to OpenShift's SCC, which assigns a UID from the namespace's range (above 1000000000)" -}}
{{- end -}}
{{- if ne $.Values.image.pullPolicy "Always" -}}
{{- $skips = append $skips "CKV_K8S_15=image.pullPolicy is the operator's choice; with image.digest IfNotPresent is exact" -}}
{{- end -}}
{{- if .api -}}
{{- $skips = append $skips "CKV_K8S_38=this process calls the Kubernetes API as its ServiceAccount (the chart's ClusterRole)" -}}
{{- else if .reviewer -}}
{{- $skips = append $skips "CKV_K8S_38=web reviews node agents' bootstrap tokens (TokenReview) and reads their pods, its only rights" -}}
{{- end -}}
{{- if and (eq (int .port) 0) (not .job) -}}
{{- $skips = append $skips "CKV_K8S_8=no HTTP port to probe; a stuck task ends at its hard time limit and the pod is replaced when the process exits" -}}
{{- $skips = append $skips "CKV_K8S_9=no traffic is routed to this pod, so there is nothing for readiness to gate" -}}
{{- end -}}
{{- range $i, $s := $skips }}
checkov.io/skip{{ add1 $i }}: {{ $s | quote }}
{{- end -}}
{{- end -}}

{{/*
One Fatia Deployment. Called with a dict:
  root: $, component: web, role: the entrypoint's first argument, replicas, values: the component's values,
  port: container port (0: none), api: true when the process calls the Kubernetes API, recreate: true for a
  singleton that must never run twice (beat, discover).
*/}}
{{- define "fatia.deployment" -}}
{{- $ := .root -}}
{{- $v := .values -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "fatia.fullname" $ }}-{{ .component }}
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "fatia.labels" $ | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
  annotations:
    {{- include "fatia.checkovSkips" (dict "root" $ "api" (default false .api) "reviewer" (default false .reviewer) "port" .port) | trim | nindent 4 }}
spec:
  replicas: {{ .replicas }}
  revisionHistoryLimit: 5
  {{- if .recreate }}
  # Exactly one at a time: a rolling update would run the old and the new pod together.
  strategy:
    type: Recreate
  {{- end }}
  selector:
    matchLabels:
      {{- include "fatia.selector" (list $ .component) | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "fatia.labels" $ | nindent 8 }}
        app.kubernetes.io/component: {{ .component }}
      annotations:
        checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") $ | sha256sum }}
        checksum/secret: {{ include (print $.Template.BasePath "/secret.yaml") $ | sha256sum }}
    spec:
      {{- if .api }}
      serviceAccountName: {{ include "fatia.clusterServiceAccount" $ }}
      automountServiceAccountToken: true
      {{- else if .reviewer }}
      serviceAccountName: {{ include "fatia.webServiceAccount" $ }}
      automountServiceAccountToken: true
      {{- else }}
      serviceAccountName: {{ include "fatia.serviceAccount" $ }}
      automountServiceAccountToken: false
      {{- end }}
      enableServiceLinks: false
      {{- with $.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- include "fatia.podSecurityContext" $ | nindent 8 }}
      containers:
      - name: {{ .component }}
        image: {{ include "fatia.image" $ }}
        imagePullPolicy: {{ $.Values.image.pullPolicy }}
        args: [{{ .role | quote }}]
        {{- include "fatia.env" $ | nindent 8 }}
        {{- if gt (int .port) 0 }}
        ports:
        - name: http
          containerPort: {{ .port }}
          protocol: TCP
        # /healthz: the process answers; /readyz: the database, broker and cache do too (portal/health.py).
        startupProbe:
          httpGet: {path: /healthz, port: http}
          periodSeconds: 2
          failureThreshold: 60
        livenessProbe:
          httpGet: {path: /healthz, port: http}
          periodSeconds: 10
          timeoutSeconds: 3
          failureThreshold: 3
        readinessProbe:
          httpGet: {path: /readyz, port: http}
          periodSeconds: 10
          timeoutSeconds: 3
          failureThreshold: 2
        {{- end }}
        resources:
          {{- toYaml $v.resources | nindent 10 }}
        securityContext:
          {{- toYaml $.Values.securityContext | nindent 10 }}
        volumeMounts:
          {{- include "fatia.volumeMounts" $ | nindent 10 }}
      volumes:
        {{- include "fatia.volumes" $ | nindent 8 }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}

{{/* The node agent (agent.yaml): its ServiceAccount, and the portal URL it reports to. */}}
{{- define "fatia.agentServiceAccount" -}}{{ default (printf "%s-agent" (include "fatia.fullname" .)) .Values.agent.serviceAccount.name }}{{- end -}}
{{- define "fatia.agentPortalUrl" -}}{{ default (printf "https://%s" .Values.host) .Values.agent.portalUrl }}{{- end -}}
