package livebench

import (
	"slices"
	"testing"
	"time"
)

func TestOptionsFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc    string
		env     map[string]string
		want    Options
		wantErr bool
	}{
		{desc: "defaults", want: Options{
			Duration: 15 * time.Second, Workers: 32, Rounds: 1, Timeout: 3 * time.Second, Attempts: 3, Seed: 1, CaptchaMarker: DefaultCaptchaMarker,
		}},
		{desc: "everything set", env: map[string]string{
			"SWITCHYARD_LIVEBENCH_DURATION": "2s", "SWITCHYARD_LIVEBENCH_WORKERS": "8", "SWITCHYARD_LIVEBENCH_ROUNDS": "3", "SWITCHYARD_LIVEBENCH_TIMEOUT": "1s",
			"SWITCHYARD_LIVEBENCH_ATTEMPTS": "2", "SWITCHYARD_LIVEBENCH_SEED": "7", "SWITCHYARD_LIVEBENCH_CONTENDERS": " oracle, switchyard ,",
			"SWITCHYARD_LIVEBENCH_BINARY": "/x/switchyard", "SWITCHYARD_LIVEBENCH_SWITCHYARD_ENV": "SWITCHYARD_RETRY_ATTEMPT_TIMEOUT=1s, A=b",
			"SWITCHYARD_LIVEBENCH_CAPTCHA_MARKER": "captcha-box",
		}, want: Options{
			Duration: 2 * time.Second, Workers: 8, Rounds: 3, Timeout: time.Second, Attempts: 2, Seed: 7,
			Contenders: []string{"oracle", "switchyard"}, Binary: "/x/switchyard", CaptchaMarker: "captcha-box",
			SwitchyardEnv: []string{"SWITCHYARD_RETRY_ATTEMPT_TIMEOUT=1s", "A=b"},
		}},
		{desc: "a bad duration", env: map[string]string{"SWITCHYARD_LIVEBENCH_DURATION": "fifteen"}, wantErr: true},
		{desc: "bad workers", env: map[string]string{"SWITCHYARD_LIVEBENCH_WORKERS": "many"}, wantErr: true},
		{desc: "a gateway setting without a value", env: map[string]string{"SWITCHYARD_LIVEBENCH_SWITCHYARD_ENV": "SWITCHYARD_X"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			got, err := optionsFromEnv(func(k string) string { return tt.env[k] })
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got.Duration != tt.want.Duration || got.Workers != tt.want.Workers || got.Rounds != tt.want.Rounds || got.Timeout != tt.want.Timeout ||
				got.Attempts != tt.want.Attempts || got.Seed != tt.want.Seed || got.Binary != tt.want.Binary ||
				got.CaptchaMarker != tt.want.CaptchaMarker || !slices.Equal(got.Contenders, tt.want.Contenders) || !slices.Equal(got.SwitchyardEnv, tt.want.SwitchyardEnv) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestOptionsWants(t *testing.T) {
	t.Parallel()
	all := Options{}
	some := Options{Contenders: []string{"oracle"}}
	if !all.wants("haproxy") || !some.wants("oracle") || some.wants("haproxy") {
		t.Fatal("wants does not follow Contenders")
	}
}
